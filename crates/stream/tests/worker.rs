//! The worker alone: word count over a known corpus gives exactly the expected counts in one
//! worker (in-memory path) and across two workers (TCP path); a multi-lang bolt in Python runs
//! inside the topology; a worker that dies mid-stream loses nothing a reliable spout sent.

use hetsched_core::testkit::ScratchDir;
use hetsched_stream::{Worker, WorkerConfig};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

const CORPUS: [&str; 6] = [
    "the quick brown fox jumps over the lazy dog",
    "a stitch in time saves nine",
    "the early bird catches the worm",
    "all that glitters is not gold",
    "the pen is mightier than the sword",
    "actions speak louder than words",
];
const REPEAT: u64 = 50;

fn expected(upper: bool) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in CORPUS {
        for w in line.split_whitespace() {
            let w = if upper {
                w.to_uppercase()
            } else {
                w.to_string()
            };
            *m.entry(w).or_default() += REPEAT;
        }
    }
    m
}

/// A fresh directory for this test (removed when it passes).
fn scratch(name: &str) -> ScratchDir {
    ScratchDir::new("stream", name)
}

fn lines() -> String {
    CORPUS
        .iter()
        .map(|l| format!("\"{l}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Word count: 2 spouts → 3 splits (shuffle) → 3 counts (fields); `split` is the split
/// component's code lines.
fn wordcount(split: &str) -> String {
    format!(
        r#"name = "wc"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 2
cpu = 10.0
builtin = "corpus-spout"
params = {{ lines = [{}], repeat = {REPEAT}, reliable = true, timeout = "2s" }}
[[component]]
name = "split"
kind = "bolt"
parallelism = 3
cpu = 10.0
{split}
[[component]]
name = "count"
kind = "bolt"
parallelism = 3
cpu = 10.0
builtin = "count"
params = {{ output = "counts-{{index}}.tsv", every = "50ms" }}
[[stream]]
from = "sentences"
to = "split"
rate = 10.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 20.0
"#,
        lines()
    )
}

fn config(dir: &Path, text: &str, worker: u32, assignment: Vec<u32>) -> WorkerConfig {
    WorkerConfig {
        topology_origin: "wc.toml".into(),
        topology_text: text.into(),
        worker,
        assignment,
        base_dir: dir.to_path_buf(),
        work_dir: dir.join(format!("worker-{worker}")),
        listen: "127.0.0.1:0".into(),
        started_ns: 0,
        await_state: Vec::new(),
        key: hetsched_stream::auth::topology_key("test", "wc", 0),
        encrypt: false,
    }
}

/// Tells workers 0 (`a`) and 1 (`b`) where the other listens.
fn introduce(a: &Worker, b: &Worker) {
    a.set_peers(HashMap::from([(1, b.local_addr())]));
    b.set_peers(HashMap::from([(0, a.local_addr())]));
}

fn read_counts(dir: &Path) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for i in 0..3 {
        let text = std::fs::read_to_string(dir.join(format!("counts-{i}.tsv"))).unwrap_or_default();
        for line in text.lines() {
            let (w, c) = line.split_once('\t').expect("word<TAB>count");
            *m.entry(w.to_string()).or_default() += c.parse::<u64>().expect("a count");
        }
    }
    m
}

fn wait_done(workers: &[&Worker]) {
    let start = Instant::now();
    while !workers.iter().all(|w| w.spouts_done()) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the spouts never finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn word_count_in_one_worker_is_exact() {
    let dir = scratch("one");
    let text = wordcount("builtin = \"split\"");
    let w = Worker::start(config(&dir, &text, 0, vec![0; 8])).expect("starts");
    wait_done(&[&w]);
    let report = w.report();
    w.stop();
    assert_eq!(read_counts(&dir), expected(false));
    // Every tuple passed in memory; the pair counters add up to the words.
    assert_eq!(report.remote_out, 0);
    let words: u64 = expected(false).values().sum();
    let into_count: u64 = report
        .pairs
        .iter()
        .filter(|p| p.to >= 5)
        .map(|p| p.tuples)
        .sum();
    assert_eq!(into_count, words);
    let spouts: u64 = report
        .executors
        .iter()
        .filter(|e| e.executor < 2)
        .map(|e| e.acked)
        .sum();
    assert_eq!(spouts, CORPUS.len() as u64 * REPEAT);
    assert!(report.latency.count >= words);
}

#[test]
fn word_count_across_two_workers_over_tcp_is_exact() {
    let dir = scratch("two");
    let text = wordcount("builtin = \"split\"");
    // Executors alternate between the workers, so most tuples cross.
    let assignment: Vec<u32> = (0..8).map(|e| e % 2).collect();
    let a = Worker::start(config(&dir, &text, 0, assignment.clone())).expect("starts");
    let b = Worker::start(config(&dir, &text, 1, assignment)).expect("starts");
    introduce(&a, &b);
    wait_done(&[&a, &b]);
    let (ra, rb) = (a.report(), b.report());
    a.stop();
    b.stop();
    assert_eq!(read_counts(&dir), expected(false));
    assert!(ra.remote_out > 0 && rb.remote_out > 0, "{ra:?} {rb:?}");
    assert_eq!(ra.remote_out + rb.remote_out, ra.remote_in + rb.remote_in);
    assert_eq!(ra.dropped + rb.dropped, 0);
}

fn python_has(python: &str, module: &str) -> bool {
    std::process::Command::new(python)
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_python_multilang_bolt_splits_the_corpus_correctly() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    let dir = scratch("multilang");
    let split = format!(
        "command = [\"python3\", \"{}\"]\nparams = {{ upper = true }}",
        fixture("split_bolt.py")
    );
    let text = wordcount(&split);
    let assignment: Vec<u32> = (0..8).map(|e| e % 2).collect();
    let a = Worker::start(config(&dir, &text, 0, assignment.clone())).expect("starts");
    let b = Worker::start(config(&dir, &text, 1, assignment)).expect("starts");
    introduce(&a, &b);
    wait_done(&[&a, &b]);
    a.stop();
    b.stop();
    assert_eq!(read_counts(&dir), expected(true));
    // Each program wrote its pid file in the pidDir of the handshake.
    let pids = std::fs::read_dir(dir.join("worker-0/pids"))
        .expect("pid dirs")
        .count()
        + std::fs::read_dir(dir.join("worker-1/pids"))
            .expect("pid dirs")
            .count();
    assert_eq!(pids, 3);
}

#[test]
fn a_pystorm_bolt_runs_unchanged() {
    // A Python with pystorm: HETSCHED_PYSTORM_PYTHON (e.g. a virtualenv's python), else python3.
    let python = std::env::var("HETSCHED_PYSTORM_PYTHON").unwrap_or_else(|_| "python3".into());
    if !python_has(&python, "pystorm") {
        eprintln!(
            "SKIPPED: PyPI's pystorm is not importable by `{python}` (pip install pystorm, or set HETSCHED_PYSTORM_PYTHON)"
        );
        return;
    }
    let dir = scratch("pystorm");
    let split = format!(
        "command = [\"{python}\", \"{}\"]",
        fixture("pystorm_split.py")
    );
    let text = wordcount(&split);
    let w = Worker::start(config(&dir, &text, 0, vec![0; 8])).expect("starts");
    wait_done(&[&w]);
    w.stop();
    assert_eq!(read_counts(&dir), expected(false));
}

#[test]
fn a_lost_worker_loses_no_tuple_of_a_reliable_spout() {
    let dir = scratch("replay");
    // spout (worker 0) → split (worker 0) → sink (worker 1); worker 1 is stopped mid-stream and
    // replaced; the spout replays every tree the sink did not ack, so every word reaches a sink
    // file at least once.
    let text = format!(
        r#"name = "replay"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 1
cpu = 10.0
builtin = "corpus-spout"
params = {{ lines = [{}], repeat = 400, reliable = true, timeout = "1s", max_pending = 50, rate = 2000.0 }}
[[component]]
name = "split"
kind = "bolt"
parallelism = 1
cpu = 10.0
builtin = "split"
[[component]]
name = "sink"
kind = "bolt"
parallelism = 1
cpu = 10.0
builtin = "file-sink"
params = {{ path = "sink.txt" }}
[[stream]]
from = "sentences"
to = "split"
rate = 10.0
[[stream]]
from = "split"
to = "sink"
rate = 10.0
"#,
        lines()
    );
    let assignment = vec![0, 0, 1];
    let a = Worker::start(config(&dir, &text, 0, assignment.clone())).expect("starts");
    let b = Worker::start(config(&dir, &text, 1, assignment.clone())).expect("starts");
    introduce(&a, &b);
    std::thread::sleep(Duration::from_millis(300));
    b.stop();
    std::thread::sleep(Duration::from_millis(300));
    let c = Worker::start(config(&dir, &text, 1, assignment)).expect("restarts");
    a.set_peers(HashMap::from([(1, c.local_addr())]));
    c.set_peers(HashMap::from([(0, a.local_addr())]));
    wait_done(&[&a]);
    let report = a.report();
    a.stop();
    c.stop();
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for w in std::fs::read_to_string(dir.join("sink.txt"))
        .expect("sink")
        .lines()
    {
        *got.entry(w.to_string()).or_default() += 1;
    }
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for line in CORPUS {
        for w in line.split_whitespace() {
            *want.entry(w.to_string()).or_default() += 400;
        }
    }
    for (w, n) in &want {
        assert!(
            got.get(w).copied().unwrap_or(0) >= *n,
            "{w}: {:?} < {n}",
            got.get(w)
        );
    }
    assert!(
        report.executors[0].failed > 0,
        "some trees were replayed: {report:?}"
    );
}

#[test]
fn a_new_placement_moves_only_the_executors_that_change_and_loses_no_count() {
    let dir = scratch("reassign");
    // Word count over two workers (executors alternate: worker 0 runs 0 2 4 6, worker 1 runs
    // 1 3 5 7). Mid-run a new placement moves spout #1 and count #5 from worker 1 to worker 0
    // and count #6 the other way; every other executor stays where it is.
    let text = wordcount("builtin = \"split\"").replace(
        "reliable = true, timeout = \"2s\"",
        "reliable = true, timeout = \"20s\", rate = 100.0",
    );
    let before: Vec<u32> = (0..8).map(|e| e % 2).collect();
    let a = Worker::start(config(&dir, &text, 0, before.clone())).expect("starts");
    let b = Worker::start(config(&dir, &text, 1, before)).expect("starts");
    introduce(&a, &b);
    std::thread::sleep(Duration::from_millis(600));
    let started = |r: &hetsched_stream::WorkerReport| -> BTreeMap<u32, u64> {
        r.executors
            .iter()
            .map(|e| (e.executor, e.started_ns))
            .collect()
    };
    let (sa, sb) = (started(&a.report()), started(&b.report()));
    assert!(sa.values().chain(sb.values()).all(|t| *t > 0));
    let after = vec![0, 0, 0, 1, 0, 0, 1, 1];
    let (came, left) = a.reassign(0, after.clone(), &[1, 5]).expect("worker 0");
    assert_eq!((came, left), (vec![1, 5], vec![6]));
    let (came, left) = b.reassign(1, after, &[6]).expect("worker 1");
    assert_eq!((came, left), (vec![6], vec![1, 5]));
    // A new placement may renumber the workers: each learns the addresses anew.
    introduce(&a, &b);
    wait_done(&[&a, &b]);
    // Let the counts' last snapshots land.
    std::thread::sleep(Duration::from_millis(200));
    let (ra, rb) = (a.report(), b.report());
    a.stop();
    b.stop();
    // Nothing was lost or replayed: the counts are exact, handed-over tables included.
    assert_eq!(read_counts(&dir), expected(false));
    let failed: u64 = ra.executors.iter().map(|e| e.failed).sum();
    assert_eq!(failed, 0, "{ra:?}");
    assert_eq!(ra.dropped + rb.dropped, 0);
    // The executors that stayed kept their threads; the moved ones started anew.
    let (na, nb) = (started(&ra), started(&rb));
    assert_eq!(na.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2, 4, 5]);
    assert_eq!(nb.keys().copied().collect::<Vec<_>>(), vec![3, 6, 7]);
    for e in [0, 2, 4] {
        assert_eq!(na[&e], sa[&e], "executor {e} was restarted");
    }
    for e in [3, 7] {
        assert_eq!(nb[&e], sb[&e], "executor {e} was restarted");
    }
    assert!(na[&1] > sb[&1] && na[&5] > sb[&5] && nb[&6] > sa[&6]);
}

#[test]
fn a_placement_that_renumbers_the_workers_hands_every_state_to_the_right_worker() {
    let dir = scratch("renumber");
    // Word count over three workers (executor e on worker e % 3). The new placement puts every
    // executor on the second worker, which becomes worker 0; the first becomes worker 1 and
    // the third stays worker 2, both hosting nothing. As with agents, each worker hears of the
    // placement on its own and of the new addresses a moment later: the third worker's counts
    // leave while it still knows worker 0 by its old address (the first worker's). Their
    // tables must still reach the second worker: no count is lost. Over TLS, as on a cluster
    // that runs TLS (the other placement test runs over plain TCP).
    let text = wordcount("builtin = \"split\"").replace(
        "reliable = true, timeout = \"2s\"",
        "reliable = true, timeout = \"20s\", rate = 100.0",
    );
    let before: Vec<u32> = (0..8).map(|e| e % 3).collect();
    let tls = |worker: u32| WorkerConfig {
        encrypt: true,
        ..config(&dir, &text, worker, before.clone())
    };
    let a = Worker::start(tls(0)).expect("starts");
    let b = Worker::start(tls(1)).expect("starts");
    let c = Worker::start(tls(2)).expect("starts");
    let (pa, pb, pc) = (a.local_addr(), b.local_addr(), c.local_addr());
    a.set_peers(HashMap::from([(1, pb), (2, pc)]));
    b.set_peers(HashMap::from([(0, pa), (2, pc)]));
    c.set_peers(HashMap::from([(0, pa), (1, pb)]));
    std::thread::sleep(Duration::from_millis(600));
    let after = vec![0; 8];
    // The third worker first: its counts (#5) and split (#2) hand over at once.
    c.reassign(2, after.clone(), &[]).expect("worker 2");
    std::thread::sleep(Duration::from_millis(300));
    c.set_peers(HashMap::from([(0, pb), (1, pa)]));
    // Executors that move to the second worker: those of the first (0 3 6) and third (2 5).
    b.reassign(0, after.clone(), &[0, 2, 3, 5, 6])
        .expect("worker 0");
    b.set_peers(HashMap::from([(1, pa), (2, pc)]));
    a.reassign(1, after, &[]).expect("worker 1");
    a.set_peers(HashMap::from([(0, pb), (2, pc)]));
    wait_done(&[&a, &b, &c]);
    std::thread::sleep(Duration::from_millis(200));
    a.stop();
    c.stop();
    b.stop();
    assert_eq!(read_counts(&dir), expected(false));
}

/// Opens a connection to `w` and reads its challenge.
fn challenged(w: &Worker) -> (std::net::TcpStream, hetsched_stream::auth::Nonce) {
    use hetsched_stream::tuple::{Frame, MAX_HANDSHAKE_FRAME};
    let mut s = std::net::TcpStream::connect(w.local_addr()).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut scratch = Vec::new();
    match Frame::read_at_most(&mut s, &mut scratch, MAX_HANDSHAKE_FRAME) {
        Ok(Some(Frame::Challenge(n))) => (s, n),
        other => panic!("expected a challenge, got {other:?}"),
    }
}

/// Whether the worker closed `s` without another frame.
fn closed(s: &mut std::net::TcpStream) -> bool {
    use hetsched_stream::tuple::{Frame, MAX_HANDSHAKE_FRAME};
    matches!(
        Frame::read_at_most(s, &mut Vec::new(), MAX_HANDSHAKE_FRAME),
        Ok(None) | Err(_)
    )
}

/// What worker 1's proofs cover on a plain connection challenged with `nl`, its nonce `nc`.
fn transcript(
    nl: &hetsched_stream::auth::Nonce,
    nc: &hetsched_stream::auth::Nonce,
) -> hetsched_stream::auth::Transcript {
    hetsched_stream::auth::Transcript {
        listener: *nl,
        connector: *nc,
        worker: 1,
        binding: [0; 32],
    }
}

/// Worker 1's hello to the challenge `nl`, with nonce `nc`, proved under `h` (plain TCP).
fn hello(
    h: &hetsched_stream::auth::Handshake,
    nl: &hetsched_stream::auth::Nonce,
    nc: &hetsched_stream::auth::Nonce,
) -> hetsched_stream::tuple::Frame {
    hetsched_stream::tuple::Frame::Hello {
        worker: 1,
        nonce: *nc,
        proof: h.hello(&transcript(nl, nc)),
    }
}

#[test]
fn only_a_connection_that_proves_the_worker_key_delivers_tuples() {
    use hetsched_stream::auth::{Handshake, topology_key};
    use hetsched_stream::tuple::{Frame, MAX_HANDSHAKE_FRAME, Tuple, Value};
    let dir = scratch("forged");
    let text = wordcount("builtin = \"split\"");
    let cfg = config(&dir, &text, 0, vec![0; 8]);
    let key = cfg.key.clone();
    let w = Worker::start(cfg).expect("starts");
    // One word straight into count executor 5, as if from split executor 2.
    let word = |text: &str| {
        Frame::Tuples(vec![Tuple {
            src: 2,
            dst: 5,
            root: 0,
            edge: 0,
            emitted_ns: 0,
            values: vec![Value::Str(text.into())],
        }])
    };
    let mut scratch = Vec::new();
    // Tuples without a handshake.
    let (mut s, _) = challenged(&w);
    word("INJECTED")
        .write(&mut s, &mut scratch)
        .expect("writes");
    assert!(
        closed(&mut s),
        "no welcome to a connection that skipped the handshake"
    );
    // A hello proved with another key (another cluster's token).
    let (mut s, nl) = challenged(&w);
    let nc = [1u8; 32];
    let other = Handshake::new(&topology_key("another token", "wc", 0));
    hello(&other, &nl, &nc)
        .write(&mut s, &mut scratch)
        .expect("writes");
    word("INJECTED")
        .write(&mut s, &mut scratch)
        .expect("writes");
    assert!(closed(&mut s), "no welcome to another key's proof");
    // A replayed proof: the right key's hello for an earlier challenge.
    let right = Handshake::new(&key);
    let (mut s, nl2) = challenged(&w);
    hello(&right, &nl, &nc)
        .write(&mut s, &mut scratch)
        .expect("writes");
    assert_ne!(nl, nl2, "every challenge is fresh");
    assert!(closed(&mut s), "no welcome to a replayed proof");
    // The key itself: welcomed with the worker's own proof, and the word is counted.
    let (mut s, nl) = challenged(&w);
    hello(&right, &nl, &nc)
        .write(&mut s, &mut scratch)
        .expect("writes");
    match Frame::read_at_most(&mut s, &mut scratch, MAX_HANDSHAKE_FRAME) {
        Ok(Some(Frame::Welcome(p))) => assert!(right.check_welcome(&transcript(&nl, &nc), &p)),
        other => panic!("expected a welcome, got {other:?}"),
    }
    word("ADMITTED")
        .write(&mut s, &mut scratch)
        .expect("writes");
    let start = Instant::now();
    while w.report().remote_in < 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "never delivered");
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_done(&[&w]);
    let r = w.report();
    w.stop();
    assert_eq!(r.remote_in, 1, "only the proved connection's tuple arrived");
    assert_eq!(r.refused_connections, 3, "the three that proved nothing");
    assert!(!r.encrypted);
    let counts = read_counts(&dir);
    assert_eq!(counts.get("ADMITTED"), Some(&1));
    assert!(!counts.contains_key("INJECTED"), "{counts:?}");
    // Everything else is the corpus, exactly.
    let mut rest = counts;
    rest.remove("ADMITTED");
    assert_eq!(rest, expected(false));
}

#[test]
fn workers_with_different_keys_exchange_nothing() {
    let dir = scratch("two-keys");
    let text = wordcount("builtin = \"split\"");
    let assignment: Vec<u32> = (0..8).map(|e| e % 2).collect();
    let a = Worker::start(config(&dir, &text, 0, assignment.clone())).expect("starts");
    let mut cb = config(&dir, &text, 1, assignment);
    cb.key = hetsched_stream::auth::topology_key("test", "wc", 1);
    let b = Worker::start(cb).expect("starts");
    introduce(&a, &b);
    std::thread::sleep(Duration::from_secs(2));
    let (ra, rb) = (a.report(), b.report());
    a.stop();
    b.stop();
    assert_eq!((ra.remote_out, ra.remote_in), (0, 0), "{ra:?}");
    assert_eq!((rb.remote_out, rb.remote_in), (0, 0), "{rb:?}");
}

#[test]
fn a_worker_without_a_key_does_not_start_and_idle_handshakes_are_bounded() {
    let dir = scratch("no-key");
    let text = wordcount("builtin = \"split\"");
    let mut c = config(&dir, &text, 0, vec![0; 8]);
    c.key = "short".into();
    let Err(err) = Worker::start(c) else {
        panic!("a short key is refused")
    };
    assert!(err.to_string().contains("worker key has 5 bytes"), "{err}");
    let w = Worker::start(config(&dir, &text, 0, vec![0; 8])).expect("starts");
    // Connect them all first (a handshake gives up after 5 s), then take their challenges;
    // from as many loopback addresses as the cap per address asks.
    let per_ip = hetsched_stream::net::MAX_HANDSHAKING_PER_IP;
    let mut idle: Vec<_> = (0..hetsched_stream::net::MAX_HANDSHAKING)
        .map(|i| connect_from([127, 0, 1, (i / per_ip) as u8], w.local_addr()))
        .collect();
    for s in &mut idle {
        use hetsched_stream::tuple::{Frame, MAX_HANDSHAKE_FRAME};
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let first = Frame::read_at_most(s, &mut Vec::new(), MAX_HANDSHAKE_FRAME);
        assert!(matches!(first, Ok(Some(Frame::Challenge(_)))), "{first:?}");
    }
    let mut one_more = connect_from([127, 0, 2, 1], w.local_addr());
    one_more
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    assert!(closed(&mut one_more), "closed before any challenge");
    drop(idle);
    // Their receivers see the ends and leave: a connection is challenged again.
    let start = Instant::now();
    loop {
        let mut s = std::net::TcpStream::connect(w.local_addr()).expect("connects");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        if !closed(&mut s) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never challenged again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    w.stop();
}

/// A connection to `to` from loopback address `from` (Linux answers the whole of 127.0.0.0/8),
/// so that a test can open connections from several source addresses.
fn connect_from(from: [u8; 4], to: std::net::SocketAddr) -> std::net::TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let local = std::net::SocketAddr::from((from, 0));
    s.bind(&local.into()).expect("binds to a loopback address");
    s.connect(&to.into()).expect("connects");
    s.into()
}

#[test]
fn one_address_cannot_take_more_than_its_share_of_the_handshake_slots() {
    use hetsched_stream::tuple::{Frame, MAX_HANDSHAKE_FRAME};
    let dir = scratch("per-ip");
    let text = wordcount("builtin = \"split\"");
    let w = Worker::start(config(&dir, &text, 0, vec![0; 8])).expect("starts");
    let flood = [127, 0, 3, 1];
    let mut idle: Vec<_> = (0..hetsched_stream::net::MAX_HANDSHAKING_PER_IP)
        .map(|_| connect_from(flood, w.local_addr()))
        .collect();
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let first = Frame::read_at_most(s, &mut Vec::new(), MAX_HANDSHAKE_FRAME);
        assert!(matches!(first, Ok(Some(Frame::Challenge(_)))), "{first:?}");
    }
    let mut one_more = connect_from(flood, w.local_addr());
    one_more
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    assert!(closed(&mut one_more), "its address is over its share");
    // Another address is still challenged, while the flood's connections hold their slots.
    let (_s, _nonce) = challenged(&w);
    assert!(w.report().refused_connections >= 1);
    drop(idle);
    w.stop();
}

/// A TCP relay to `target` on a port of its own that keeps a copy of every byte it passes on,
/// both ways.
fn recording_relay(
    target: std::net::SocketAddr,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = listener.local_addr().expect("addr");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(a) = conn else { break };
            let Ok(b) = std::net::TcpStream::connect(target) else {
                continue;
            };
            let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
                continue;
            };
            for (mut from, mut to) in [(a, b), (b2, a2)] {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    loop {
                        match from.read(&mut buf) {
                            Ok(0) | Err(_) => {
                                let _ = to.shutdown(std::net::Shutdown::Write);
                                return;
                            }
                            Ok(n) => {
                                kept.lock().expect("lock").extend_from_slice(&buf[..n]);
                                if to.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        }
    });
    (addr, seen)
}

/// Word count across two workers whose connections pass through recording relays: the counts,
/// the tuples that crossed, and every byte that crossed.
fn word_count_through_relays(name: &str, encrypt: bool) -> (BTreeMap<String, u64>, u64, Vec<u8>) {
    let dir = scratch(name);
    let text = wordcount("builtin = \"split\"");
    let assignment: Vec<u32> = (0..8).map(|e| e % 2).collect();
    let mut ca = config(&dir, &text, 0, assignment.clone());
    ca.encrypt = encrypt;
    let mut cb = config(&dir, &text, 1, assignment);
    cb.encrypt = encrypt;
    let a = Worker::start(ca).expect("starts");
    let b = Worker::start(cb).expect("starts");
    let (to_b, seen_b) = recording_relay(b.local_addr());
    let (to_a, seen_a) = recording_relay(a.local_addr());
    a.set_peers(HashMap::from([(1, to_b)]));
    b.set_peers(HashMap::from([(0, to_a)]));
    wait_done(&[&a, &b]);
    let (ra, rb) = (a.report(), b.report());
    a.stop();
    b.stop();
    assert_eq!(ra.remote_out + rb.remote_out, ra.remote_in + rb.remote_in);
    assert!(ra.encrypted == encrypt && rb.encrypted == encrypt);
    assert_eq!(ra.refused_connections + rb.refused_connections, 0);
    let mut wire = seen_a.lock().expect("lock").clone();
    wire.extend_from_slice(&seen_b.lock().expect("lock"));
    (read_counts(&dir), ra.remote_out + rb.remote_out, wire)
}

#[test]
fn over_tls_word_count_is_exact_and_no_word_crosses_the_network_in_clear() {
    let contains = |wire: &[u8], word: &str| wire.windows(word.len()).any(|w| w == word.as_bytes());
    let (counts, crossed, wire) = word_count_through_relays("relay-tls", true);
    assert_eq!(counts, expected(false));
    assert!(
        crossed > 0 && wire.len() > 1000,
        "{crossed} tuples, {} bytes",
        wire.len()
    );
    for word in ["glitters", "mightier", "stitch"] {
        assert!(!contains(&wire, word), "`{word}` crossed in clear over TLS");
    }
    // The same run without TLS: the words are on the wire (so the check above can fail).
    let (counts, _, wire) = word_count_through_relays("relay-plain", false);
    assert_eq!(counts, expected(false));
    assert!(contains(&wire, "glitters"));
}

#[test]
fn an_encrypted_worker_refuses_a_plain_connection_and_a_plain_one_an_encrypted_peer() {
    let dir = scratch("mixed");
    let text = wordcount("builtin = \"split\"");
    let mut c = config(&dir, &text, 0, vec![0; 8]);
    c.encrypt = true;
    let w = Worker::start(c).expect("starts");
    // A plain client waiting for a challenge gets none: the worker waits for a TLS hello.
    let mut s = std::net::TcpStream::connect(w.local_addr()).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    use std::io::Write;
    s.write_all(b"\0\0\0\x05\x04abcd").expect("writes");
    assert!(closed(&mut s), "no frame to a plain client");
    w.stop();
    // Workers that disagree on TLS exchange nothing.
    let assignment: Vec<u32> = (0..8).map(|e| e % 2).collect();
    let mut ca = config(&dir, &text, 0, assignment.clone());
    ca.encrypt = true;
    let a = Worker::start(ca).expect("starts");
    let b = Worker::start(config(&dir, &text, 1, assignment)).expect("starts");
    introduce(&a, &b);
    std::thread::sleep(Duration::from_secs(2));
    let (ra, rb) = (a.report(), b.report());
    a.stop();
    b.stop();
    assert_eq!(ra.remote_in + rb.remote_in, 0, "{ra:?} {rb:?}");
}

#[test]
fn a_connection_that_drips_its_hello_is_closed_within_the_handshake_time() {
    // A peer that sends its hello one byte at a time, each within the per-read timeout, must
    // not hold a handshake slot past `HANDSHAKE_TIMEOUT` (256 such peers would otherwise shut
    // every real worker out for minutes).
    let dir = scratch("drip");
    let w = Worker::start(config(
        &dir,
        &wordcount("builtin = \"split\""),
        0,
        vec![0; 8],
    ))
    .expect("starts");
    let (s, nl) = challenged(&w);
    let mut frame = Vec::new();
    hello(
        &hetsched_stream::auth::Handshake::new(&"k".repeat(64)),
        &nl,
        &[7; 32],
    )
    .encode(&mut frame);
    drip_until_closed(s, frame);
    w.stop();
}

#[test]
fn a_python_bolt_emitting_thousands_per_input_neither_stalls_nor_loses_a_count() {
    // Each input makes the program write 3,000 emits without waiting for anything: more than
    // the worker reads ahead of the executor (multilang's MESSAGE_QUEUE), so the program blocks
    // on its output while its input is still being written. The executor must keep reading.
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    let dir = scratch("multilang-flood");
    let words = 3000;
    let line: Vec<String> = (0..words).map(|i| format!("w{}", i % 100)).collect();
    let text = format!(
        r#"name = "wc"
[[component]]
name = "sentences"
kind = "spout"
parallelism = 1
cpu = 10.0
builtin = "corpus-spout"
params = {{ lines = ["{}"], repeat = 40 }}
[[component]]
name = "split"
kind = "bolt"
parallelism = 1
cpu = 10.0
command = ["python3", "{}"]
[[component]]
name = "count"
kind = "bolt"
parallelism = 1
cpu = 10.0
builtin = "count"
params = {{ output = "counts-{{index}}.tsv", every = "50ms" }}
[[stream]]
from = "sentences"
to = "split"
rate = 10.0
[[stream]]
from = "split"
to = "count"
grouping = "fields"
rate = 20.0
"#,
        line.join(" "),
        fixture("split_bolt.py")
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0; 3])).expect("starts");
    let expected: BTreeMap<String, u64> = (0..100).map(|i| (format!("w{i}"), 40 * 30)).collect();
    let start = Instant::now();
    while read_counts(&dir) != expected {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "counts after 60 s: {} words of {}",
            read_counts(&dir).values().sum::<u64>(),
            40 * words
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    w.stop();
    assert_eq!(read_counts(&dir), expected);
}

#[test]
fn an_encrypted_worker_closes_a_connection_that_drips_its_tls_hello_within_the_handshake_time() {
    // The deadline covers TLS's handshake too: a ClientHello sent a byte at a time is closed at
    // `HANDSHAKE_TIMEOUT`, not when its last byte comes.
    let dir = scratch("drip-tls");
    let mut c = config(&dir, &wordcount("builtin = \"split\""), 0, vec![0; 8]);
    c.encrypt = true;
    let w = Worker::start(c).expect("starts");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("hetsched-stream-worker").expect("name");
    let mut tls = rustls::ClientConnection::new(std::sync::Arc::new(client), name).expect("client");
    let mut hello = Vec::new();
    tls.write_tls(&mut hello).expect("a ClientHello");
    assert!(hello.len() > 20, "{} bytes", hello.len());
    let s = std::net::TcpStream::connect(w.local_addr()).expect("connects");
    drip_until_closed(s, hello);
    w.stop();
}

/// Writes `bytes` to the worker on `s` one every 700 ms (a hello paced to outlast any per-read
/// timeout) and checks that the worker closes the connection within its handshake time (plus
/// a margin), not after the last byte.
fn drip_until_closed(mut s: std::net::TcpStream, bytes: Vec<u8>) {
    use std::io::{Read, Write};
    let mut drip = s.try_clone().expect("clone");
    let dripper = std::thread::spawn(move || {
        for b in bytes {
            if drip.write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(700));
        }
    });
    let limit = hetsched_stream::net::HANDSHAKE_TIMEOUT + Duration::from_secs(3);
    s.set_read_timeout(Some(limit)).expect("timeout");
    let start = Instant::now();
    let mut byte = [0u8; 1];
    let ended = match s.read(&mut byte) {
        Ok(0) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        Ok(_) => false,
    };
    assert!(
        ended && start.elapsed() < limit,
        "the dripping connection was still open after {:?}",
        start.elapsed()
    );
    let _ = s.shutdown(std::net::Shutdown::Both);
    dripper.join().expect("dripper");
}

/// A spout and a bolt of one executor each (executor 0 `source`, executor 1 `sink`), their
/// code lines `spout` and `bolt`.
fn spout_to_bolt(spout: &str, bolt: &str) -> String {
    format!(
        r#"name = "wc"
[[component]]
name = "source"
kind = "spout"
parallelism = 1
cpu = 10.0
{spout}
[[component]]
name = "sink"
kind = "bolt"
parallelism = 1
cpu = 10.0
{bolt}
[[stream]]
from = "source"
to = "sink"
rate = 10.0
"#
    )
}

/// `misbehaving.py` as a component's code, with its params.
fn misbehaving(params: &str) -> String {
    format!(
        "command = [\"python3\", \"{}\"]\nparams = {{ {params} }}",
        fixture("misbehaving.py")
    )
}

/// The pid executor `e`'s program wrote in worker 0's pidDir (there once the worker started:
/// the handshake is over).
fn program_pid(dir: &Path, e: u32) -> u32 {
    let pids = dir.join("worker-0/pids").join(e.to_string());
    let entry = std::fs::read_dir(&pids)
        .expect("the pid dir")
        .next()
        .expect("a pid file")
        .expect("a pid file");
    entry
        .file_name()
        .to_string_lossy()
        .parse()
        .expect("a pid file named after the pid")
}

/// Whether process `pid` runs (a zombie, dead and not reaped, does not).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            != Some("Z")
    })
}

/// Why executor `e` of `w` ended, if it did.
fn ended(w: &Worker, e: u32) -> Option<String> {
    let c = w.counter(e).expect("the executor's counters");
    c.ended.lock().expect("ended").clone()
}

/// Waits until executor `e`'s program (`pid`) is gone, at most `bound`; returns how long it
/// took from `since`.
fn wait_killed(w: &Worker, e: u32, pid: u32, since: Instant, bound: Duration) -> Duration {
    while runs(pid) {
        assert!(
            since.elapsed() < bound,
            "the silent program (pid {pid}) still runs after {bound:?}; executor: {:?}",
            ended(w, e)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    since.elapsed()
}

#[test]
fn a_multilang_bolt_that_stops_answering_is_killed_after_its_timeout_and_says_so() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    let dir = scratch("multilang-hung-bolt");
    // The program acks a few inputs, then sleeps for ever: alive, reading nothing, answering
    // no heartbeat.
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { rate = 20.0 }",
        &misbehaving("mode = \"hang\", after = 5, \"topology.subprocess.timeout.secs\" = 2"),
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let started = Instant::now();
    let pid = program_pid(&dir, 1);
    assert!(runs(pid), "the program runs once the worker started");
    // Within its 2 s timeout plus a heartbeat or two; 30 s leaves room for a loaded machine.
    let took = wait_killed(&w, 1, pid, started, Duration::from_secs(30));
    assert!(
        took >= Duration::from_secs(2),
        "killed after {took:?}, before its 2 s timeout"
    );
    let why = ended(&w, 1).expect("the executor says why it ended");
    assert!(
        why.starts_with(&format!(
            "sink#0: the program (pid {pid}) sent nothing for "
        )),
        "{why}"
    );
    let silent: f64 = why
        .split("sent nothing for ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .expect("how long it was silent");
    assert!(silent > 2.0, "silent past its 2 s: {why}");
    assert!(
        why.contains(
            "while the worker waited for an answer to its heartbeats (at most 2 s, `topology.subprocess.timeout.secs`): killed"
        ),
        "{why}"
    );
    // The spout runs on: the worker itself still works.
    let before = w
        .counter(0)
        .expect("spout")
        .emitted
        .load(std::sync::atomic::Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    let after = w
        .counter(0)
        .expect("spout")
        .emitted
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(after > before, "the spout stopped with its bolt");
    w.stop();
}

#[test]
fn a_multilang_spout_that_stops_answering_is_killed_after_its_timeout_and_says_so() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang spout test needs it");
        return;
    }
    let dir = scratch("multilang-hung-spout");
    // The program answers a few `next`s and acks, then sleeps for ever: the worker waits on
    // its `sync`.
    let text = spout_to_bolt(
        &misbehaving("mode = \"hang\", after = 3, \"topology.subprocess.timeout.secs\" = 2"),
        "builtin = \"count\"",
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let started = Instant::now();
    let pid = program_pid(&dir, 0);
    let took = wait_killed(&w, 0, pid, started, Duration::from_secs(30));
    assert!(
        took >= Duration::from_secs(2),
        "killed after {took:?}, before its 2 s timeout"
    );
    let why = ended(&w, 0).expect("the executor says why it ended");
    assert!(
        why.starts_with(&format!(
            "source#0: the program (pid {pid}) sent nothing for "
        )),
        "{why}"
    );
    assert!(
        why.contains("while the worker waited for its sync after "),
        "{why}"
    );
    assert!(
        why.ends_with("(at most 2 s, `topology.subprocess.timeout.secs`): killed"),
        "{why}"
    );
    w.stop();
}

#[test]
fn a_multilang_bolt_that_never_acks_holds_its_unacked_inputs_only_until_their_trees_time_out() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    use std::sync::atomic::Ordering;
    let dir = scratch("multilang-no-ack");
    // 50 trees in flight at most, each failed and replayed after 1 s: the spout sends on and
    // on, and the bolt would keep every input it ever got.
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { reliable = true, timeout = \"1s\", max_pending = 50 }",
        &misbehaving("mode = \"no-ack\", \"topology.subprocess.timeout.secs\" = 3"),
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let spout = w.counter(0).expect("the spout's counters");
    let bolt = w.counter(1).expect("the bolt's counters");
    let received = || bolt.received_from[0].load(Ordering::Relaxed);
    let started = Instant::now();
    let mut most = 0;
    while received() < 400 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the bolt received {} inputs in 90 s",
            received()
        );
        most = most.max(bolt.unacked.load(Ordering::Relaxed));
        std::thread::sleep(Duration::from_millis(20));
    }
    // An input is kept its tree's timeout (1 s) plus at most a heartbeat (1 s): about 100
    // inputs at the spout's pace, never the 400 received.
    assert!(
        most <= 250,
        "the bolt held {most} unacked inputs of {} received",
        received()
    );
    assert!(
        bolt.expired.load(Ordering::Relaxed) >= 100,
        "{} inputs expired",
        bolt.expired.load(Ordering::Relaxed)
    );
    assert!(
        spout.failed.load(Ordering::Relaxed) > 0,
        "trees are replayed"
    );
    assert_eq!(
        ended(&w, 1),
        None,
        "a program answering its heartbeats runs on"
    );
    w.stop();
}

/// Waits (at most `bound`) until executor `e`'s program in worker 0 is one other than
/// `other` and runs; returns its pid and the task id it was handshaken with (its pid file's
/// text).
fn wait_program(dir: &Path, e: u32, other: Option<u32>, bound: Duration) -> (u32, String) {
    let start = Instant::now();
    loop {
        let pids = dir.join("worker-0/pids").join(e.to_string());
        let found = std::fs::read_dir(&pids).ok().and_then(|mut d| {
            let entry = d.next()?.ok()?;
            let pid: u32 = entry.file_name().to_string_lossy().parse().ok()?;
            let task = std::fs::read_to_string(entry.path()).ok()?;
            Some((pid, task))
        });
        if let Some((pid, task)) = found
            && Some(pid) != other
            && runs(pid)
            && !task.is_empty()
        {
            return (pid, task);
        }
        assert!(
            start.elapsed() < bound,
            "no program other than {other:?} runs for executor {e} after {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Executor `e`'s entry in `w`'s report.
fn reported(w: &Worker, e: u32) -> hetsched_stream::metrics::ExecutorReport {
    w.report()
        .executors
        .into_iter()
        .find(|x| x.executor == e)
        .expect("the executor is in the report")
}

#[test]
fn a_multilang_bolt_whose_program_exits_is_started_again_in_place_and_the_inputs_it_held_replay() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    use std::sync::atomic::Ordering;
    let dir = scratch("multilang-restart");
    let marker = dir.join("exited-once");
    // The first program takes inputs without acking them, then exits; the one started after
    // it acks. Trees time out after 60 s: a tree failed sooner was failed back by the worker.
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { reliable = true, timeout = \"60s\", rate = 20.0 }",
        &misbehaving(&format!(
            "mode = \"exit-once\", after = 10, marker = \"{}\"",
            marker.display()
        )),
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let started = Instant::now();
    let (first, task) = wait_program(&dir, 1, None, Duration::from_secs(30));
    assert_eq!(task, "1", "the handshake's task id is the executor's");
    let (second, task) = wait_program(&dir, 1, Some(first), Duration::from_secs(60));
    assert_eq!(task, "1", "the program started again has the same task id");
    assert!(!runs(first), "the first program is gone");
    let spout = w.counter(0).expect("the spout's counters");
    let bolt = w.counter(1).expect("the bolt's counters");
    assert_eq!(bolt.restarts.load(Ordering::Relaxed), 1);
    let why = ended(&w, 1).expect("why the first program ended");
    assert_eq!(why, "sink#0: the program exited (exit status: 3)");
    // The inputs the first program held were failed back at its end, long before their
    // trees' 60 s timeout, and the spout replays them to the program started again, which
    // acks them.
    while spout.failed.load(Ordering::Relaxed) == 0 || spout.acked.load(Ordering::Relaxed) < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(45),
            "after {:?}: {} trees failed, {} acked",
            started.elapsed(),
            spout.failed.load(Ordering::Relaxed),
            spout.acked.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(runs(second), "the program started again runs on");
    let r = reported(&w, 1);
    assert_eq!(r.restarts, 1);
    assert_eq!(r.ended.as_deref(), Some(why.as_str()));
    assert!(!r.gave_up);
    w.stop();
    assert!(!runs(second), "the worker's stop ends the program");
}

#[test]
fn a_multilang_program_that_keeps_exiting_is_given_up_on_and_reported_so() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    use std::sync::atomic::Ordering;
    let dir = scratch("multilang-give-up");
    // Exits right after its handshake, every time: started again after 1, 2, 4, 8 and 16 s,
    // then given up on (5 restarts at most within 300 s).
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { rate = 20.0 }",
        &misbehaving("mode = \"exit\", after = 0"),
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let started = Instant::now();
    let bolt = w.counter(1).expect("the bolt's counters");
    while !bolt.gave_up.load(Ordering::Relaxed) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not given up after {:?}: {} restarts",
            started.elapsed(),
            bolt.restarts.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The waits alone add up to 31 s.
    assert!(
        started.elapsed() >= Duration::from_secs(31),
        "given up after {:?}",
        started.elapsed()
    );
    let r = reported(&w, 1);
    assert!(r.gave_up, "the report says the executor was given up on");
    assert_eq!(r.restarts, 5);
    let why = r.ended.expect("why");
    assert!(
        why.starts_with(
            "sink#0: the program ended 6 times within 300 s (at most 5 restarts): not started again; last: sink#0: the program exited"
        ),
        "{why}"
    );
    // It stays ended; the spout runs on.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(bolt.restarts.load(Ordering::Relaxed), 5);
    let emitted = || w.counter(0).expect("spout").emitted.load(Ordering::Relaxed);
    let before = emitted();
    std::thread::sleep(Duration::from_millis(300));
    assert!(emitted() > before, "the spout stopped with its bolt");
    w.stop();
}

#[test]
fn a_multilang_program_killed_for_its_silence_takes_the_children_it_started_with_it() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    let dir = scratch("multilang-children");
    let children = dir.join("children");
    // The program starts a `sleep` and a sleeper that ignores SIGTERM, acks a few inputs,
    // then hangs: killed after 2 s of silence.
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { rate = 20.0 }",
        &misbehaving(&format!(
            "mode = \"hang\", after = 5, \"topology.subprocess.timeout.secs\" = 2, children = \"{}\"",
            children.display()
        )),
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let started = Instant::now();
    let pid = program_pid(&dir, 1);
    let kids: Vec<u32> = std::fs::read_to_string(&children)
        .expect("the children's pids")
        .lines()
        .map(|l| l.parse().expect("a pid"))
        .collect();
    assert_eq!(kids.len(), 2);
    assert!(kids.iter().all(|&k| runs(k)), "the children run");
    wait_killed(&w, 1, pid, started, Duration::from_secs(30));
    // SIGTERM reaches both; the one that ignores it gets SIGKILL 2 s later.
    let killed = Instant::now();
    while kids.iter().any(|&k| runs(k)) {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "children {:?} outlive their program",
            kids.iter().filter(|&&k| runs(k)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    w.stop();
    // The program started again after the kill started children of its own: the worker's
    // stop ends them too.
    let all: Vec<u32> = std::fs::read_to_string(&children)
        .expect("the children's pids")
        .lines()
        .map(|l| l.parse().expect("a pid"))
        .collect();
    let left: Vec<u32> = all.into_iter().filter(|&k| runs(k)).collect();
    assert!(left.is_empty(), "children {left:?} outlive the worker");
}

/// The pids `misbehaving.py` wrote to its `escapee` file: the `setsid` child, then the
/// orphaned one (waited for: the program writes them during its handshake).
#[cfg(target_os = "linux")]
fn escapees(path: &Path) -> Vec<u32> {
    let started = Instant::now();
    loop {
        let pids: Vec<u32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.len() >= 2 {
            return pids;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the program wrote no escapee pids to {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The session of process `pid` (`/proc/PID/stat` field 6).
#[cfg(target_os = "linux")]
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// A child that left its program's process group and session (`setsid`) escaped the group
/// kill: it ran on, `sleep 300`, after its worker stopped. It is found below the program and
/// ended with it.
#[cfg(target_os = "linux")]
#[test]
fn a_multilang_programs_child_that_called_setsid_does_not_outlive_the_stopped_worker() {
    if !python_has("python3", "json") {
        eprintln!("SKIPPED: python3 is not installed; the multi-lang bolt test needs it");
        return;
    }
    let dir = scratch("multilang-setsid");
    let file = dir.join("escapees");
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { rate = 20.0 }",
        &misbehaving(&format!("escapee = \"{}\"", file.display())),
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let program = program_pid(&dir, 1);
    let pids = escapees(&file);
    let (left, orphan) = (pids[0], pids[1]);
    assert!(runs(left), "the setsid child runs");
    assert_ne!(
        session_of(left),
        session_of(program),
        "the child left the program's session"
    );
    w.stop();
    let stopped = Instant::now();
    while runs(left) {
        if stopped.elapsed() > Duration::from_secs(5) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &left.to_string(), &orphan.to_string()])
                .status();
            panic!("the program's setsid child {left} outlives the stopped worker");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The orphan is re-parented past this test process (no subreaper here): only a worker
    // process, a subreaper, ends it (the CLI's topology test checks that). Not left running.
    let _ = std::process::Command::new("kill")
        .args(["-9", &orphan.to_string()])
        .status();
}

/// A multi-lang bolt whose program cannot start at all (it is not there) is an executor whose
/// program ended at once: said in its `ended` and started again as a program that exits is —
/// the worker starts, and its spout runs on. Before, the worker failed to start, and every
/// executor of it with it, while the topology was listed as running.
#[test]
fn a_multilang_program_that_cannot_start_leaves_its_worker_and_the_other_executors_running() {
    use std::sync::atomic::Ordering;
    let dir = scratch("multilang-missing");
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { rate = 20.0 }",
        "command = [\"/nonexistent/hetsched-test-program\"]",
    );
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("the worker starts");
    let started = Instant::now();
    let bolt = w.counter(1).expect("the bolt's counters");
    // Its first start again comes after 1 s.
    while bolt.restarts.load(Ordering::Relaxed) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "not started again after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let why = ended(&w, 1).expect("why it does not run");
    assert!(
        why.starts_with("sink#0: ") && why.contains("/nonexistent/hetsched-test-program"),
        "{why}"
    );
    let emitted = || w.counter(0).expect("spout").emitted.load(Ordering::Relaxed);
    let before = emitted();
    std::thread::sleep(Duration::from_millis(300));
    assert!(emitted() > before, "the spout runs on");
    w.stop();
}

/// A program that exits before its handshake is said to have exited, with its status, at
/// once — not to have let the 30 s handshake time run out.
#[test]
fn a_multilang_program_that_exits_before_its_handshake_is_said_to_have_exited() {
    let dir = scratch("multilang-exit-at-once");
    let text = spout_to_bolt(
        "builtin = \"sequence-spout\"\nparams = { rate = 20.0 }",
        "command = [\"sh\", \"-c\", \"exit 4\"]",
    );
    let started = Instant::now();
    let w = Worker::start(config(&dir, &text, 0, vec![0, 0])).expect("starts");
    let why = loop {
        if let Some(why) = ended(&w, 1).filter(|w| w.contains("cannot start the program again")) {
            break why;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not said after {:?}: {:?}",
            started.elapsed(),
            ended(&w, 1)
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        why.ends_with(
            "`sh -c exit 4` ended before it answered the multi-lang handshake: sink#0: the program exited (exit status: 4)"
        ),
        "{why}"
    );
    w.stop();
}
