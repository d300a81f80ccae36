//! Stream topology workers on this node (issue 16): about every 500 ms the agent tells the
//! server (`TopologyAgent.SyncWorkers`) which worker processes it runs, with each worker's latest
//! counters, and starts or stops workers to match the answer. An agent that runs no worker
//! asks to be held: the server answers when it has a worker for this node (or after at most
//! [`IDLE_HOLD`]; the open call keeps the node alive in the topology kind meanwhile), so an
//! idle agent costs the server one call per hold (five minutes).
//!
//! A worker is `hetsched stream-worker --config FILE` (this same executable), driven over its
//! stdin and stdout (`hetsched_stream::process`): the agent forwards the addresses of the
//! topology's other workers, and reads the worker's address and periodic reports. A worker that
//! exits (crash, SIGKILL) is started again if the server still assigns it: at the next sync, then,
//! while it keeps exiting before it listens, after a back-off that doubles from 0.5 s to 30 s
//! ([`RESTART_BACKOFF`]). Why it exited (what it printed) is told the server, which shows it.
//!
//! Each worker has a directory of its own (`WORK_DIR/stream/TOPOLOGY-gG-wW`, or the same below
//! its account's, `run_as_owner`) holding its configuration (with the topology's worker key) and
//! its stderr. It is removed when the worker is stopped or exits (a worker started again makes it
//! afresh), and what an earlier agent left is removed when the agent starts: no key outlives its
//! worker. What the programs of an earlier agent's workers left running (they died with it,
//! SIGKILLed, and ended nothing) is ended then too, found by their mark
//! ([`end_dead_workers_leftovers`]).
//! On an agent with `run_as_owner` a user's topology's workers run as the user's Unix account
//! ([`crate::run_as`]), in the account's directory, so its executors' programs (multi-language
//! bolts and spouts) have the account's rights, never the agent's.
//! While the server cannot be reached, workers keep running untouched; if the agent itself dies,
//! its workers see their stdin close and stop (the server then places their executors on the
//! nodes left).

use hetsched_proto as pb;
use hetsched_proto::topology_agent_client::TopologyAgentClient;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tracing::{info, warn};

type Key = (String, u64, u32);

#[derive(Debug, Default)]
struct Info {
    addr: String,
    pid: u32,
    report: Option<pb::WorkerCounters>,
    /// The last error the worker printed (`{"event": "error"}`: why it could not start).
    error: Option<String>,
}

/// A worker's report in protobuf terms (the worker prints it as JSON on its stdout).
fn counters(r: hetsched_stream::WorkerReport) -> pb::WorkerCounters {
    pb::WorkerCounters {
        worker: r.worker,
        at_ns: r.at_ns,
        pairs: r
            .pairs
            .into_iter()
            .map(|p| pb::PairCounter {
                from: p.from,
                to: p.to,
                tuples: p.tuples,
            })
            .collect(),
        executors: r
            .executors
            .into_iter()
            .map(|e| pb::ExecutorCounters {
                executor: e.executor,
                name: e.name,
                cpu_ns: e.cpu_ns,
                emitted: e.emitted,
                received: e.received,
                acked: e.acked,
                failed: e.failed,
                done: e.done,
                started_ns: e.started_ns,
                unacked: e.unacked,
                expired: e.expired,
                restarts: e.restarts,
                ended: e.ended,
                gave_up: e.gave_up,
            })
            .collect(),
        remote_out: r.remote_out,
        remote_in: r.remote_in,
        dropped: r.dropped,
        latency: Some(pb::LatencyCounters {
            count: r.latency.count,
            p50_us: r.latency.p50_us,
            p99_us: r.latency.p99_us,
            max_us: r.latency.max_us,
        }),
        rss_bytes: r.rss_bytes,
        encrypted: r.encrypted,
        refused_connections: r.refused_connections,
    }
}

/// How this agent's workers guard their connections.
#[derive(Clone, Debug)]
pub struct Secrecy {
    /// The agent token, from which each topology's worker key is derived.
    pub token: String,
    /// Whether workers speak TLS to each other: the agent reaches its server over TLS.
    pub encrypt: bool,
}

/// The worker configuration the server sent for topology `topology`, as the worker reads it,
/// with the topology's worker key derived from the agent token and TLS as the agent's own link
/// (the agent adds its work directory and listen address in [`start`]).
fn worker_config(
    spec: &pb::WorkerSpec,
    topology: &str,
    secrecy: &Secrecy,
) -> hetsched_stream::WorkerConfig {
    hetsched_stream::WorkerConfig {
        topology_origin: spec.topology_origin.clone(),
        topology_text: spec.topology_text.clone(),
        worker: spec.worker,
        assignment: spec.assignment.clone(),
        base_dir: PathBuf::from(&spec.base_dir),
        work_dir: PathBuf::new(),
        listen: String::new(),
        started_ns: spec.started_ns,
        await_state: spec.await_state.clone(),
        key: hetsched_stream::auth::topology_key(&secrecy.token, topology, spec.started_ns),
        encrypt: secrecy.encrypt,
    }
}

struct WorkerProc {
    child: Child,
    stdin: ChildStdin,
    info: Arc<Mutex<Info>>,
    peers_sent: BTreeMap<u32, String>,
    /// The cores the server books for it (`WorkerAssignment.cores`, from its latest sync).
    cores: u32,
    /// Its directory ([`start`]).
    dir: PathBuf,
    /// The account it runs as (`run_as_owner`), which reads its stderr file.
    account: Option<crate::run_as::Account>,
    /// The process (pid and start time) whose mark its programs carry, and its user: what
    /// still carries that mark once it is gone is ended ([`end_left_behind`]).
    process: Option<hetsched_stream::process_tree::Proc>,
    uid: u32,
}

/// Ends, off the async threads, what worker `w`'s programs left running after it exited: a
/// worker ends its programs and all below them when it stops, but a SIGKILLed one ends
/// nothing, and its programs, re-parented to init, would run on. They carry its mark
/// (`hetsched_stream::process_tree::MARK`), inherited by what they started, in their process
/// group or not.
fn end_left_behind(w: &WorkerProc, label: String) {
    let (Some(gone), uid) = (w.process, w.uid) else {
        return;
    };
    tokio::task::spawn_blocking(move || {
        let ended = hetsched_stream::process_tree::end_marked_by(gone, uid);
        if ended > 0 {
            warn!(
                worker = %label,
                "ended what its programs left running ({ended} found by their mark)"
            );
        }
    });
}

impl WorkerProc {
    /// The last line the worker wrote to its stderr file (read as its account), if any.
    fn last_words(&self) -> Option<String> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f =
            crate::run_as::open_as(self.account.as_ref(), &self.dir.join("worker.err")).ok()?;
        let len = f.metadata().ok()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
        let mut tail = Vec::new();
        f.read_to_end(&mut tail).ok()?;
        let text = String::from_utf8_lossy(&tail);
        let line = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
        Some(line.chars().take(500).collect())
    }
}

/// Worker `k`'s directory below `base` (the work directory, or its account's): `stream/` and
/// the topology's name with every character but ASCII letters, digits, `-` and `_` made `_`,
/// then the placement's generation and the worker's index. A name that had to be changed so
/// also carries `.` and the first 16 hex digits of its SHA-256, so two topologies never share
/// a directory (`wc.a` and `wc_a` would both be `wc_a`: the second worker would overwrite the
/// first's configuration, its key included, `hetsched topology log` of one would read the
/// other's stderr, and stopping either would remove both's directory). No name kept as it is
/// holds a `.`, so it meets no changed one.
pub fn worker_dir(base: &std::path::Path, k: &(String, u64, u32)) -> PathBuf {
    let safe: String =
        k.0.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
    let name = if safe == k.0 {
        safe
    } else {
        let digest = ring::digest::digest(&ring::digest::SHA256, k.0.as_bytes());
        let hex: String = digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{safe}.{hex}")
    };
    base.join("stream")
        .join(format!("{name}-g{}-w{}", k.1, k.2))
}

/// The longest wait before a worker that keeps exiting before it listens is started again (the
/// first wait is [`SYNC_INTERVAL`], doubling at each exit).
pub const RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// Removes what workers of an earlier agent left in `work_dir` (their directories, with their
/// keys): `WORK_DIR/stream` and each account's `stream` directory. A link an account put there
/// is removed, never followed.
pub fn remove_leftovers(work_dir: &std::path::Path) {
    let _ = std::fs::remove_dir_all(work_dir.join("stream"));
    if let Ok(areas) = std::fs::read_dir(work_dir.join(crate::run_as::AREA)) {
        for area in areas.flatten() {
            let _ = std::fs::remove_dir_all(area.path().join("stream"));
        }
    }
}

/// The users whose processes may carry a worker's mark: the agent's own, and with
/// `run_as_owner` each account whose directory is in `WORK_DIR/users` (a user's workers run as
/// its account, in that directory, which [`crate::run_as::area`] made the account's).
fn workers_users(
    work_dir: &std::path::Path,
    run_as_owner: bool,
) -> std::collections::BTreeSet<u32> {
    use std::os::unix::fs::MetadataExt;
    let mut uids = std::collections::BTreeSet::from([nix::unistd::geteuid().as_raw()]);
    if run_as_owner && let Ok(areas) = std::fs::read_dir(work_dir.join(crate::run_as::AREA)) {
        for area in areas.flatten() {
            // Not followed: only a directory the agent made counts.
            if let Ok(m) = std::fs::symlink_metadata(area.path())
                && m.is_dir()
            {
                uids.insert(m.uid());
            }
        }
    }
    uids
}

/// Ends what the programs of workers that died with an earlier agent left running (blocking:
/// it reads `/proc`). A worker ends its programs when it stops, and the agent ends what a
/// SIGKILLed worker left ([`end_left_behind`]), but a worker SIGKILLed with its agent (a crash,
/// the machine's agent killed) has no agent to do so: its programs, re-parented to init, would
/// run for good. They carry its mark; every process of the workers' users whose mark names a
/// worker (pid and start time) that no longer runs is ended. A worker that runs (another
/// agent's on this machine) keeps its programs.
pub fn end_dead_workers_leftovers(work_dir: &std::path::Path, run_as_owner: bool) {
    let uids = workers_users(work_dir, run_as_owner);
    let ended = hetsched_stream::process_tree::end_marked_by_dead_workers(&uids);
    if ended > 0 {
        warn!(
            "ended what the programs of stream workers that died with an earlier agent left running \
             ({ended} found by their mark)"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// How often an agent running stream workers syncs (their reports ride on it).
const SYNC_INTERVAL: Duration = Duration::from_millis(500);

/// Largest sync reply the agent decodes. Every worker the reply assigns carries its
/// topology's whole text (up to `MAX_JOB_FILE_BYTES`, 2 MiB), so a node running workers of a
/// few large topologies is sent more than gRPC's default 4 MiB: with that default the agent
/// decoded no sync at all and started none of its workers.
const MAX_SYNC_REPLY_BYTES: usize = 256 << 20;

/// The longest the server may hold the sync of an agent running no worker (the open call keeps
/// the node seen meanwhile): the longest it holds any.
const IDLE_HOLD: Duration = pb::MAX_HOLD;

/// The node the workers run on, as this agent sees it.
#[derive(Clone, Debug)]
pub struct Host {
    /// The node's name.
    pub node: String,
    /// The agent's identity, as registered: the server takes a node's sync only with it.
    pub identity: String,
    /// Its cores.
    pub cores: u32,
    /// The agent's work directory (workers' directories go below it).
    pub work_dir: PathBuf,
    /// `run_as_owner`: a user's workers run as its account.
    pub run_as_owner: bool,
}

/// Starts the sync loop in the background; `secrecy` keys and encrypts the workers' connections.
/// `outside` follows how many workers run here and the cores the server books for them (the
/// agent's idle timeout and its queue of prefetched tasks read it).
pub fn spawn(
    mut connection: crate::Connection,
    mut registered: crate::Registered,
    interceptor: pb::TokenInterceptor,
    secrecy: Secrecy,
    host: Host,
    outside: crate::outside::Outside,
) {
    let Host {
        node,
        identity,
        cores,
        work_dir,
        run_as_owner,
    } = host;
    tokio::spawn(async move {
        let on = |c: &crate::Connection| {
            TopologyAgentClient::with_interceptor(c.borrow().clone(), interceptor.clone())
                .max_decoding_message_size(MAX_SYNC_REPLY_BYTES)
        };
        let mut client = on(&connection);
        let mut workers: HashMap<Key, WorkerProc> = HashMap::new();
        // Workers that cannot start, and why: logged once, told the server at every sync
        // (`topology show` says it) until they start or are no longer assigned here.
        let mut refused: HashMap<Key, String> = HashMap::new();
        // Workers that exited before they listened: how many times in a row, and not to be
        // started again before when.
        let mut backoff: HashMap<Key, (u32, tokio::time::Instant)> = HashMap::new();
        // Before any worker starts: what runs then is an earlier agent's.
        let (dir, own) = (work_dir.clone(), run_as_owner);
        let _ = tokio::task::spawn_blocking(move || end_dead_workers_leftovers(&dir, own)).await;
        remove_leftovers(&work_dir);
        // An earlier agent's leftovers go at once, but syncs are made only as a registered node.
        if !crate::first_registration(&mut registered).await {
            return;
        }
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("hetsched"));
        let mut every = tokio::time::interval(SYNC_INTERVAL);
        // After a held call the tick is overdue: sync once at once, not once per missed tick.
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            // Reap workers that exited; why is told the server (`topology show`) until one
            // started again listens.
            workers.retain(|k, w| match w.child.try_wait() {
                Ok(Some(status)) => {
                    let (printed, listened) = {
                        let mut i = lock(&w.info);
                        (i.error.take(), !i.addr.is_empty())
                    };
                    // One that never listened waits longer each time before it starts again.
                    let failures = if listened {
                        1
                    } else {
                        backoff.get(k).map_or(1, |b| b.0 + 1)
                    };
                    let wait = SYNC_INTERVAL
                        .saturating_mul(1 << (failures - 1).min(16))
                        .min(RESTART_BACKOFF);
                    backoff.insert(k.clone(), (failures, tokio::time::Instant::now() + wait));
                    let times = match failures {
                        1 => String::new(),
                        n => format!(
                            ", {n} times in a row without listening, started again in {:.1} s",
                            wait.as_secs_f64()
                        ),
                    };
                    let why = match printed.or_else(|| w.last_words()) {
                        Some(e) => format!("its worker process exited ({status}){times}: {e}"),
                        None => format!("its worker process exited ({status}){times}"),
                    };
                    if refused.get(k) != Some(&why) {
                        warn!(topology = %k.0, worker = k.2, "stream worker exited: {why}");
                        refused.insert(k.clone(), why);
                    }
                    end_left_behind(w, format!("{}#{}", k.0, k.2));
                    let _ = std::fs::remove_dir_all(&w.dir);
                    false
                }
                _ => true,
            });
            for (k, w) in &workers {
                if !lock(&w.info).addr.is_empty() {
                    refused.remove(k);
                    backoff.remove(k);
                }
            }
            publish(&workers, &outside);
            let running: Vec<pb::RunningWorker> = workers
                .iter()
                .map(|(k, w)| {
                    let i = lock(&w.info);
                    pb::RunningWorker {
                        topology: k.0.clone(),
                        generation: k.1,
                        worker: k.2,
                        addr: i.addr.clone(),
                        pid: i.pid,
                        report: i.report.clone(),
                        ..Default::default()
                    }
                })
                .collect();
            // Running no worker, there is nothing to report: the server may hold the call until
            // it has a worker for this node, so an idle agent costs it a call per hold, not one
            // per interval.
            let hold = if running.is_empty() && refused.is_empty() {
                IDLE_HOLD
            } else {
                Duration::ZERO
            };
            let req = pb::SyncWorkersRequest {
                node: node.clone(),
                identity: identity.clone(),
                cores,
                workers: running,
                hold_ms: hold.as_millis() as u64,
                start_errors: refused
                    .iter()
                    .map(|(k, message)| pb::WorkerStartError {
                        topology: k.0.clone(),
                        generation: k.1,
                        worker: k.2,
                        message: message.clone(),
                    })
                    .collect(),
            };
            if connection.has_changed().unwrap_or(false) {
                connection.mark_unchanged();
                client = on(&connection);
            }
            let call =
                tokio::time::timeout(hold + Duration::from_secs(3), client.sync_workers(req));
            let reply = tokio::select! {
                r = call => match r {
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => {
                        // A server without topologies: nothing to do, ever.
                        return;
                    }
                    _ => continue,
                },
                // The agent moved to a new connection (this one may be dead): sync there.
                changed = connection.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    connection.mark_changed();
                    continue;
                }
            };
            if reply.report_now {
                for w in workers.values_mut() {
                    let _ = w.stdin.write_all(b"{\"cmd\":\"report\"}\n").await;
                    let _ = w.stdin.flush().await;
                }
            }
            // What the agent does not act on is told the server as a start error, as a worker
            // that cannot start is (a running one is stopped: it is no longer assigned here).
            let (wanted, bad) = assignments(reply.workers, cores);
            // A new placement that keeps a running worker (same node and process): hand it the
            // new routes under its new key instead of stopping it and starting another; only
            // the executors that move stop or start in it.
            for (k, a) in &wanted {
                if a.keep_generation == 0 || workers.contains_key(k) {
                    continue;
                }
                let old: Key = (k.0.clone(), a.keep_generation, a.keep_worker);
                let Some(mut w) = workers.remove(&old) else {
                    continue;
                };
                let (assignment, await_state) = a
                    .config
                    .as_ref()
                    .map(|c| (c.assignment.clone(), c.await_state.clone()))
                    .unwrap_or_default();
                let cmd = serde_json::json!({
                    "cmd": "assign", "worker": k.2, "assignment": assignment,
                    "await_state": await_state,
                });
                let line = format!("{cmd}\n");
                if w.stdin.write_all(line.as_bytes()).await.is_ok() && w.stdin.flush().await.is_ok()
                {
                    info!(topology = %k.0, generation = k.1, worker = k.2, "stream worker kept under the new placement");
                    w.peers_sent.clear();
                    workers.insert(k.clone(), w);
                } else {
                    workers.insert(old, w);
                }
            }
            // Stop what is no longer assigned.
            let stale: Vec<Key> = workers
                .keys()
                .filter(|k| !wanted.contains_key(*k))
                .cloned()
                .collect();
            for k in stale {
                if let Some(mut w) = workers.remove(&k) {
                    info!(topology = %k.0, worker = k.2, "stopping stream worker");
                    let _ = w.stdin.write_all(b"{\"cmd\":\"stop\"}\n").await;
                    let _ = w.stdin.flush().await;
                    tokio::spawn(async move {
                        if tokio::time::timeout(Duration::from_secs(5), w.child.wait())
                            .await
                            .is_err()
                        {
                            let _ = w.child.kill().await;
                            let _ = w.child.wait().await;
                            end_left_behind(&w, format!("{}#{}", k.0, k.2));
                        }
                        let _ = std::fs::remove_dir_all(&w.dir);
                    });
                }
            }
            refused.retain(|k, _| wanted.contains_key(k) || bad.contains_key(k));
            backoff.retain(|k, _| wanted.contains_key(k));
            for (k, why) in bad {
                if refused.get(&k) != Some(&why) {
                    warn!(topology = %k.0, generation = k.1, worker = k.2, "refused the server's stream worker assignment: {why}");
                    refused.insert(k, why);
                }
            }
            for (k, a) in wanted {
                let waits = backoff
                    .get(&k)
                    .is_some_and(|b| b.1 > tokio::time::Instant::now());
                if !workers.contains_key(&k) && waits {
                    continue;
                }
                if !workers.contains_key(&k) {
                    let Some(spec) = &a.config else {
                        warn!(topology = %k.0, worker = k.2, "the server sent no worker configuration");
                        continue;
                    };
                    let config = worker_config(spec, &k.0, &secrecy);
                    let started = match crate::run_as::resolve(run_as_owner, &a.run_as, &node).await
                    {
                        Ok(account) => {
                            start(&exe, &work_dir, &k, &config, run_as_owner, account.as_ref())
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    match started {
                        Ok(w) => {
                            info!(topology = %k.0, generation = k.1, worker = k.2, run_as = %a.run_as, "started stream worker");
                            workers.insert(k.clone(), w);
                        }
                        Err(e) => {
                            if refused.get(&k) != Some(&e) {
                                warn!(topology = %k.0, worker = k.2, "cannot start stream worker: {e}");
                                refused.insert(k.clone(), e);
                            }
                            continue;
                        }
                    }
                }
                let Some(w) = workers.get_mut(&k) else {
                    continue;
                };
                w.cores = a.cores;
                let peers: BTreeMap<u32, String> = a.peers.into_iter().collect();
                if peers != w.peers_sent {
                    let cmd = serde_json::json!({
                        "cmd": "peers",
                        "peers": peers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<BTreeMap<_, _>>(),
                    });
                    let line = format!("{cmd}\n");
                    if w.stdin.write_all(line.as_bytes()).await.is_ok()
                        && w.stdin.flush().await.is_ok()
                    {
                        w.peers_sent = peers;
                    }
                }
            }
            publish(&workers, &outside);
        }
    });
}

/// The workers a sync reply assigns to this node of `node_cores` cores, by key, and those it
/// assigns in a way the agent does not act on, with why: a worker of no topology, one assigned
/// twice in the reply (neither is taken: which the server meant is unknown). The cores booked
/// for a worker are held to the node's (they are what the agent's prefetched tasks wait on:
/// 4294967295 of them would hold every queued task back for good).
fn assignments(
    reply: Vec<pb::WorkerAssignment>,
    node_cores: u32,
) -> (HashMap<Key, pb::WorkerAssignment>, HashMap<Key, String>) {
    let mut wanted: HashMap<Key, pb::WorkerAssignment> = HashMap::new();
    let mut bad: HashMap<Key, String> = HashMap::new();
    for a in reply {
        let k: Key = (a.topology.clone(), a.generation, a.worker);
        let why = if a.topology.is_empty() {
            Some("the server assigned a worker of no topology".to_string())
        } else if bad.contains_key(&k) || wanted.remove(&k).is_some() {
            Some("the server assigned this worker twice in one sync".to_string())
        } else {
            None
        };
        match why {
            Some(why) => {
                bad.insert(k, why);
            }
            None => {
                // The server may book a worker more cores than the node has (its executors'
                // `cpu` add up past them): it runs, holding the node's cores at most.
                let cores = a.cores.min(node_cores);
                wanted.insert(k, pb::WorkerAssignment { cores, ..a });
            }
        }
    }
    (wanted, bad)
}

/// Tells the agent how many workers run here and the cores they hold.
fn publish(workers: &HashMap<Key, WorkerProc>, outside: &crate::outside::Outside) {
    let cores = workers
        .values()
        .map(|w| w.cores)
        .fold(0u32, u32::saturating_add);
    outside.set_workers(workers.len(), cores);
}

/// Starts worker `k` with `config`: its directory is `WORK_DIR/stream/TOPOLOGY-gG-wW`, or, for
/// a worker that runs as `account` (`run_as_owner`), the same below the account's own directory
/// ([`crate::run_as::area`]), made, written and spawned as the account.
fn start(
    exe: &std::path::Path,
    work_dir: &std::path::Path,
    k: &Key,
    config: &hetsched_stream::WorkerConfig,
    run_as_owner: bool,
    account: Option<&crate::run_as::Account>,
) -> Result<WorkerProc, String> {
    let mut config = serde_json::to_value(config).map_err(|e| format!("bad worker config: {e}"))?;
    let base = match account {
        Some(a) => crate::run_as::area(work_dir, a)
            .map_err(|e| format!("the directory of account `{}`: {e}", a.name))?,
        None => work_dir.to_path_buf(),
    };
    let dir = worker_dir(&base, k);
    config["work_dir"] = serde_json::Value::from(dir.to_string_lossy().into_owned());
    config["listen"] = serde_json::Value::from("0.0.0.0:0");
    let spawn = || -> Result<Child, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("config.json");
        // It holds the worker key: private to the worker's user (the agent's, or the account's
        // in the account's own directory).
        crate::workdir::write_private(&path, config.to_string().as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // Private (0600), as a task's captured streams are.
        let stderr = crate::workdir::open_no_follow(&dir.join("worker.err"), true)
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.arg("stream-worker")
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        if let Some(a) = account {
            cmd.current_dir(&dir);
            a.environment(&mut cmd);
        }
        cmd.spawn().map_err(|e| format!("{}: {e}", exe.display()))
    };
    // As in `crate::launch`: with `run_as_owner` every worker is made and spawned on a thread
    // of the tasks' umask, a user's as its account.
    let mut child = if run_as_owner {
        crate::run_as::hop(account, spawn).map_err(|e| e.to_string())??
    } else {
        spawn()?
    };
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let process = child.id().and_then(hetsched_stream::process_tree::proc_of);
    let info = Arc::new(Mutex::new(Info {
        pid: child.id().unwrap_or(0),
        ..Info::default()
    }));
    let reader_info = info.clone();
    let label = format!("{}#{}", k.0, k.2);
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            match v.get("event").and_then(|e| e.as_str()) {
                Some("listening") => {
                    let mut i = lock(&reader_info);
                    i.addr = v
                        .get("addr")
                        .and_then(|a| a.as_str())
                        .unwrap_or("")
                        .to_string();
                }
                Some("report") => {
                    if let Some(r) = v.get("report")
                        && let Ok(r) = serde_json::from_value(r.clone())
                    {
                        lock(&reader_info).report = Some(counters(r));
                    }
                }
                Some("error") => {
                    let message = v.get("message").and_then(|m| m.as_str()).unwrap_or("");
                    warn!(worker = %label, "{message}");
                    lock(&reader_info).error = Some(message.to_string());
                }
                _ => {}
            }
        }
    });
    Ok(WorkerProc {
        child,
        stdin,
        info,
        peers_sent: BTreeMap::new(),
        cores: 0,
        dir,
        account: account.cloned(),
        process,
        uid: account.map_or_else(|| nix::unistd::geteuid().as_raw(), |a| a.uid),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    /// A worker's report of a multi-lang executor reaches the server with what it says of
    /// the executor's program: unacked and expired inputs, restarts, why it ended, given up.
    #[test]
    fn a_workers_report_carries_its_programs_restarts_and_unacked_inputs_to_the_server() {
        let line = r#"{"worker": 0, "at_ns": 1, "pairs": [], "executors": [{"executor": 1,
            "name": "sink#0", "cpu_ns": 0, "emitted": 0, "received": 0, "acked": 0,
            "failed": 0, "done": false, "started_ns": 5, "unacked": 7, "expired": 3,
            "restarts": 2, "ended": "sink#0: the program exited (exit status: 3)",
            "gave_up": true}], "remote_out": 0, "remote_in": 0, "dropped": 0,
            "latency": {"count": 0, "p50_us": 0, "p99_us": 0, "max_us": 0}, "rss_bytes": 0}"#;
        let r: hetsched_stream::WorkerReport = serde_json::from_str(line).expect("a report");
        let c = counters(r);
        let e = &c.executors[0];
        assert_eq!(
            (e.unacked, e.expired, e.restarts, e.gave_up),
            (7, 3, 2, true)
        );
        assert_eq!(
            e.ended.as_deref(),
            Some("sink#0: the program exited (exit status: 3)")
        );
    }

    /// A sync reply's workers were taken as sent: a worker booked 4294967295 cores on a node of
    /// 8 held every prefetched task back, one assigned twice was taken at its last copy, and
    /// one of no topology was started. The booking is held to the node's cores; the others are
    /// refused with why, and the rest taken.
    #[test]
    fn a_sync_replys_nonsense_assignments_are_refused_with_why_and_the_rest_taken() {
        let a = |topology: &str, worker: u32, cores: u32| pb::WorkerAssignment {
            topology: topology.into(),
            generation: 1,
            worker,
            cores,
            ..Default::default()
        };
        let key = |t: &str, w: u32| (t.to_string(), 1, w);
        let (wanted, bad) = assignments(
            vec![
                a("wc", 0, 8),
                a("wc", 1, u32::MAX),
                a("wc", 2, 1),
                a("wc", 2, 2),
                a("wc", 2, 3),
                a("", 3, 1),
                a("wc", 4, 0),
            ],
            8,
        );
        let mut taken: Vec<&Key> = wanted.keys().collect();
        taken.sort();
        assert_eq!(taken, [&key("wc", 0), &key("wc", 1), &key("wc", 4)]);
        assert_eq!(wanted[&key("wc", 0)].cores, 8);
        // Booked past the node's cores (a legitimate placement may), it runs holding them all.
        assert_eq!(wanted[&key("wc", 1)].cores, 8);
        assert_eq!(
            bad.get(&key("wc", 2)).map(String::as_str),
            Some("the server assigned this worker twice in one sync")
        );
        assert_eq!(
            bad.get(&key("", 3)).map(String::as_str),
            Some("the server assigned a worker of no topology")
        );
        assert_eq!(bad.len(), 2);
    }

    /// Two topologies whose names differ only in characters a directory name does not keep
    /// (`wc.a`, `wc a`, `wc_a`, `wcé`, `wc_`) never share a worker's directory: each keeps its
    /// own configuration and stderr. A name kept as it is keeps its directory's name.
    #[test]
    fn topologies_whose_names_differ_only_in_unsafe_characters_get_distinct_directories() {
        let base = std::path::Path::new("/work");
        let dir = |name: &str| worker_dir(base, &(name.to_string(), 1, 0));
        let names = ["wc.a", "wc a", "wc_a", "wc/a", "wcé", "wc_", "wc__"];
        let dirs: std::collections::BTreeSet<PathBuf> = names.iter().map(|n| dir(n)).collect();
        assert_eq!(dirs.len(), names.len(), "{dirs:?}");
        assert_eq!(dir("wc_a"), base.join("stream/wc_a-g1-w0"));
        for name in names {
            let d = dir(name);
            assert_eq!(
                d.parent(),
                Some(base.join("stream").as_path()),
                "{}",
                d.display()
            );
            assert!(d.file_name().is_some_and(|f| f.len() < 255));
        }
        let longest = "é".repeat(64);
        assert!(dir(&longest).file_name().is_some_and(|f| f.len() < 255));
    }

    /// What workers of an earlier agent left is removed, in the accounts' directories too, and
    /// a link an account put in their place is removed, not followed.
    #[test]
    fn an_earlier_agents_worker_directories_are_removed_and_links_not_followed() {
        let work = ScratchDir::new("stream-workers", "leftovers");
        let kept = work.join("outside");
        std::fs::create_dir_all(&kept).expect("dir");
        std::fs::write(kept.join("precious"), "x").expect("file");
        std::fs::create_dir_all(work.join("stream/pipe-g1-w0")).expect("dir");
        std::fs::write(work.join("stream/pipe-g1-w0/config.json"), "{}").expect("config");
        std::fs::create_dir_all(work.join("users/alice/stream/mine-g2-w1")).expect("dir");
        std::fs::create_dir_all(work.join("users/bob")).expect("dir");
        std::os::unix::fs::symlink(&kept, work.join("users/bob/stream")).expect("link");
        remove_leftovers(&work);
        assert!(!work.join("stream").exists());
        assert!(!work.join("users/alice/stream").exists());
        assert!(
            work.join("users/alice").is_dir(),
            "the account's directory stays"
        );
        assert!(std::fs::symlink_metadata(work.join("users/bob/stream")).is_err());
        assert!(kept.join("precious").exists(), "the link was not followed");
    }
}
