//! The accelerator service (spec 01's AcCt) and offload from an NNode, on loopback: an ANode's
//! pipeline with its listener, and the NNode's client shipping tasks to it.

#![allow(clippy::unwrap_used)] // a failing test should panic with the error

use hetsched_agent::accel::offload::{self, Client, Target};
use hetsched_agent::accel::{Pipeline, service::AccelListener};
use hetsched_agent::launch::{Control, DEFAULT_KILL_GRACE, Kill};
use hetsched_core::testkit::ScratchDir as Temp;
use hetsched_proto as pb;
use hetsched_proto::ticket;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::oneshot;

const TOKEN: &str = "agent-token";
/// The offload key the test ANodes hold, as their server would give it, and its epoch.
const KEY: [u8; 32] = [9; 32];
const EPOCH: u64 = 7;

/// The keys a test ANode holds: [`KEY`], of [`EPOCH`].
fn held_keys() -> [pb::OffloadKey; 1] {
    [offload_key(EPOCH, &KEY)]
}

/// `key` as the offload key of `epoch`.
fn offload_key(epoch: u64, key: &[u8]) -> pb::OffloadKey {
    pb::OffloadKey {
        epoch,
        key: key.to_vec(),
    }
}

/// A fresh directory for this test (removed when it passes, kept when it fails; its name ends
/// at random, so two of one name never meet).
fn temp(name: &str) -> Temp {
    Temp::new("accel", name)
}

/// An ANode with `devices` devices serving on loopback.
async fn anode(devices: u32) -> (Pipeline, AccelListener, Temp) {
    anode_with(devices, false).await
}

/// A one-device pipeline of ANode `anode-1` staging in `work`, as the agent's own user, holding
/// its offload key.
fn pipeline(work: &Path) -> Pipeline {
    let p = Pipeline::start(
        "anode-1",
        hetsched_agent::launch::unnamed_devices(1),
        work,
        Default::default(),
        DEFAULT_KILL_GRACE,
        false,
        Default::default(),
    )
    .unwrap();
    p.set_offload_keys(&held_keys());
    p
}

/// [`anode`], with `run_as_owner` as given.
async fn anode_with(devices: u32, run_as_owner: bool) -> (Pipeline, AccelListener, Temp) {
    let work = temp("anode");
    let p = Pipeline::start(
        "anode-1",
        hetsched_agent::launch::unnamed_devices(devices),
        &work,
        Default::default(),
        DEFAULT_KILL_GRACE,
        run_as_owner,
        Default::default(),
    )
    .expect("pipeline");
    p.set_offload_keys(&held_keys());
    let l = AccelListener::bind("127.0.0.1:0".parse().unwrap(), p.clone(), TOKEN, None)
        .await
        .expect("listener");
    (p, l, work)
}

fn client(addr: std::net::SocketAddr, token: &str) -> Client {
    Client::new(
        Target {
            anode: "anode-1".into(),
            address: format!("http://{addr}"),
        },
        token,
        None,
    )
    .expect("client")
}

fn spec(dir: &Path, shell: &str, inputs: &[&str], outputs: &[&str]) -> pb::TaskSpec {
    pb::TaskSpec {
        key: 3,
        job_id: 1,
        app: "solve".into(),
        variant: "gpu".into(),
        argv: vec!["sh".into(), "-c".into(), shell.into()],
        workdir: dir.display().to_string(),
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        outputs: outputs.iter().map(|s| s.to_string()).collect(),
        accelerator: "required".into(),
        ..Default::default()
    }
}

/// Attempt `attempt` of `task` (index `index`) of spec `s`, with the ticket the server would
/// sign for it from `nnode-1` to `anode-1`.
fn assignment(task: u64, index: u32, attempt: u32, s: &pb::TaskSpec) -> pb::Assignment {
    ticketed(
        pb::Assignment {
            task_id: task,
            attempt,
            index,
            devices: vec![0],
            spec: 3,
            ..Default::default()
        },
        s,
    )
}

/// `a` with the server's ticket for it from `nnode-1` to `anode-1`, for what `s` runs (as
/// `s.run_as`), issued now (valid for an hour, as the server's).
fn ticketed(a: pb::Assignment, s: &pb::TaskSpec) -> pb::Assignment {
    let now = now_ms();
    let valid = ticket::Validity {
        issued_ms: now,
        expires_ms: now + 3_600_000,
        key_epoch: EPOCH,
    };
    ticketed_with(a, s, valid)
}

/// [`ticketed`], valid as `valid` says.
fn ticketed_with(a: pb::Assignment, s: &pb::TaskSpec, valid: ticket::Validity) -> pb::Assignment {
    ticketed_under(a, s, &KEY, valid)
}

/// [`ticketed_with`], signed with `key` (of the epoch `valid` names, or not).
fn ticketed_under(
    mut a: pb::Assignment,
    s: &pb::TaskSpec,
    key: &[u8],
    valid: ticket::Validity,
) -> pb::Assignment {
    a.offload_ticket = ticket::seal_offload(
        key,
        &ticket::Offload {
            task_id: a.task_id,
            attempt: a.attempt,
            run_as: &s.run_as,
            nnode: "nnode-1",
            anode: "anode-1",
            runs: ticket::offload_digest(s, a.index, a.entry.as_deref(), a.devices.len() as u32),
        },
        valid,
    );
    a
}

/// Milliseconds since the Unix epoch (tickets' validity is in them).
fn now_ms() -> u64 {
    hetsched_agent::launch::now_ns() / 1_000_000
}

/// A task id no test used before: an ANode runs each attempt once.
fn fresh_task() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1_000);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Offloads `a` of `s` from `nnode-1`, whose work directory is `dir`, never killed, as the
/// agent's own user.
async fn ship_plain(
    c: &Client,
    a: &pb::Assignment,
    s: &pb::TaskSpec,
    dir: &Path,
) -> pb::TaskResult {
    offload::run(c, a, s, "nnode-1", dir, false, never()).await
}

fn never() -> oneshot::Receiver<Kill> {
    let (tx, rx) = oneshot::channel();
    std::mem::forget(tx);
    rx
}

/// The command every test task runs: reads its input, writes a transformed output, and reports
/// where it ran on stdout and stderr.
const TRANSFORM: &str = "mkdir -p out && tr a-z A-Z < in/{index}.dat > out/{index}.dat && \
     echo \"devices=$CUDA_VISIBLE_DEVICES node=$HETSCHED_NODE attempt=$HETSCHED_ATTEMPT\" && echo note >&2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offloaded_task_reads_its_input_and_its_output_lands_as_if_it_ran_here() {
    let (_p, l, _w) = anode(1).await;
    let nnode_dir = temp("nnode-task");
    let nnode_work = temp("nnode-work");
    std::fs::create_dir_all(nnode_dir.join("in")).unwrap();
    // 1 MB of input that spans several chunks.
    let input: Vec<u8> = (0..1_000_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(nnode_dir.join("in/4.dat"), &input).unwrap();
    let s = spec(
        &nnode_dir,
        TRANSFORM,
        &["in/{index}.dat"],
        &["out/{index}.dat"],
    );
    let a = assignment(7, 4, 2, &s);
    let r = ship_plain(&client(l.addr, TOKEN), &a, &s, &nnode_work).await;
    assert!(r.success, "{r:?}");
    assert_eq!((r.task_id, r.attempt), (7, 2));

    // The same command run locally gives the same bytes.
    let local = temp("local");
    std::fs::create_dir_all(local.join("in")).unwrap();
    std::fs::write(local.join("in/4.dat"), &input).unwrap();
    let st = std::process::Command::new("sh")
        .args(["-c", &TRANSFORM.replace("{index}", "4")])
        .current_dir(&local)
        .output()
        .unwrap();
    assert!(st.status.success());
    assert_eq!(
        std::fs::read(nnode_dir.join("out/4.dat")).unwrap(),
        std::fs::read(local.join("out/4.dat")).unwrap()
    );
    // stdout and stderr are where a local run on the NNode puts them, and say where it ran.
    let (out, err) = hetsched_agent::launch::output_paths(&nnode_work, &s, &a);
    assert_eq!(
        std::fs::read_to_string(out).unwrap(),
        "devices=0 node=anode-1 attempt=2\n"
    );
    assert_eq!(std::fs::read_to_string(err).unwrap(), "note\n");
    // Nothing is left in the task's directory but the input and the output.
    let mut names: Vec<_> = std::fs::read_dir(&nnode_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["in", "out"]);
}

/// What the NNode's agent is told for an offloaded task while it runs on the ANode reaches it
/// there, over the offload call: an operator's signal (`hetsched signal`), once, and a new time
/// limit (`hetsched update --time-limit`), which stops it when already passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offloaded_task_gets_its_signal_and_its_new_time_limit_on_the_anode() {
    let (_p, l, _w) = anode(1).await;
    let dir = temp("offload-control");
    let marks = temp("offload-marks");
    let m = marks.display();
    let script = format!(
        "trap 'echo saved >> {m}/saved' USR1; echo > {m}/started; while true; do sleep 0.02; done"
    );
    let mut s = spec(&dir, &script, &[], &[]);
    s.time_limit_ms = 20_000;
    let (_kill, kill) = oneshot::channel();
    let (limit_tx, limit) = tokio::sync::watch::channel(s.time_limit_ms);
    let (signal_tx, signals) = tokio::sync::mpsc::unbounded_channel();
    let control = Control {
        kill,
        limit: Some(limit),
        signals: Some(signals),
    };
    let (to, a) = (client(l.addr, TOKEN), assignment(5, 0, 1, &s));
    let began = std::time::Instant::now();
    let running = offload::run(&to, &a, &s, "nnode-1", &dir, false, control);
    let saved = || std::fs::read_to_string(marks.join("saved")).unwrap_or_default();
    let operator = async {
        for _ in 0..1000 {
            if marks.join("started").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        signal_tx
            .send(nix::sys::signal::Signal::SIGUSR1)
            .expect("offload listens");
        for _ in 0..1000 {
            if !saved().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // 0.5 s from its start: already passed, so it stops at once.
        limit_tx.send_replace(500);
        std::future::pending::<()>().await
    };
    let r = tokio::select! {
        r = running => r,
        () = operator => unreachable!(),
    };
    assert!(
        !r.success && r.message.starts_with("time limit of 0.500s exceeded"),
        "{r:?}"
    );
    // How it ended on the ANode comes back with its result.
    assert_eq!(r.end(), pb::TaskEnd::TimeLimit, "{r:?}");
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "stopped by the new limit, not the shipped 20 s"
    );
    assert_eq!(saved(), "saved\n", "the signal arrived once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_input_fails_the_attempt_naming_the_file_and_a_wrong_token_is_refused() {
    let (_p, l, _w) = anode(1).await;
    let dir = temp("missing");
    let s = spec(&dir, TRANSFORM, &["in/{index}.dat"], &["out/{index}.dat"]);
    let r = ship_plain(&client(l.addr, TOKEN), &assignment(1, 9, 1, &s), &s, &dir).await;
    assert!(!r.success && !r.interrupted);
    assert!(
        r.message.contains("input file `in/9.dat` is missing"),
        "{}",
        r.message
    );
    assert_eq!(r.end(), pb::TaskEnd::StartFailed, "nothing ran: {r:?}");

    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/9.dat"), b"x").unwrap();
    let r = ship_plain(
        &client(l.addr, "not-the-token"),
        &assignment(1, 9, 1, &s),
        &s,
        &dir,
    )
    .await;
    assert!(!r.success, "{r:?}");
    assert!(r.message.contains("refused"), "{}", r.message);
    assert_eq!((r.task_id, r.attempt), (1, 1));
    assert_eq!(r.end(), pb::TaskEnd::StartFailed, "nothing ran: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_declared_output_fails_the_task() {
    let (_p, l, _w) = anode(1).await;
    let dir = temp("no-output");
    let s = spec(&dir, "true", &[], &["result.bin"]);
    let r = ship_plain(&client(l.addr, TOKEN), &assignment(2, 0, 1, &s), &s, &dir).await;
    assert!(!r.success);
    assert!(r.message.contains("`result.bin`"), "{}", r.message);
    assert_eq!(r.end(), pb::TaskEnd::OutputsMissing, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_per_device_at_a_time_offloaded_and_local_alike() {
    // One device; three offloaded tasks and one of the ANode's own, all at once. Each records
    // when it held the device; no two intervals may overlap.
    let (p, l, w) = anode(1).await;
    let c = client(l.addr, TOKEN);
    let log = temp("intervals");
    let shell = format!(
        "s=$(date +%s%N); sleep 0.2; e=$(date +%s%N); echo \"$s $e $CUDA_VISIBLE_DEVICES\" > {}/$HETSCHED_TASK_ID",
        log.display()
    );
    let mut handles = Vec::new();
    for t in 0..3u64 {
        let (c, dir, shell) = (c.clone(), temp("nn"), shell.clone());
        handles.push(tokio::spawn(async move {
            let s = spec(&dir, &shell, &[], &[]);
            ship_plain(&c, &assignment(t, t as u32, 1, &s), &s, &dir).await
        }));
    }
    let local = {
        let (p, w, shell) = (p.clone(), w.clone(), shell.clone());
        tokio::spawn(async move {
            let s = spec(&w, &shell, &[], &[]);
            p.run_local(&assignment(10, 0, 1, &s), &s, &w, never(), |_| {})
                .await
        })
    };
    for h in handles {
        assert!(h.await.unwrap().success);
    }
    assert!(local.await.unwrap().success);
    let mut spans: Vec<(u128, u128)> = std::fs::read_dir(&log)
        .unwrap()
        .map(|e| {
            let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
            let f: Vec<&str> = text.split_whitespace().collect();
            assert_eq!(f[2], "0", "the only device is 0");
            (f[0].parse().unwrap(), f[1].parse().unwrap())
        })
        .collect();
    spans.sort();
    assert_eq!(spans.len(), 4);
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "two tasks shared the device: {spans:?}");
    }
    let st = p.state(&hetsched_agent::detect::Gpus::init(), &[]);
    assert_eq!((st.process_queue, st.write_queue, st.reading), (0, 0, 0));
    assert!(st.devices.iter().all(|d| !d.busy));
}

/// An offloaded task's result says where and when it ran on the ANode (`offload_devices`,
/// `offload_started_ns`): the ANode picks its free devices, whatever device the NNode was seen
/// with, and the NNode's `started_ns` stays its own start of the offload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offloaded_result_names_the_anodes_device_and_its_start_there() {
    let (p, l, w) = anode(2).await;
    // The ANode's own task holds device 0 until told to end.
    let marks = temp("busy-marks");
    let m = marks.display();
    let hold = format!("echo > {m}/started; while [ ! -e {m}/go ]; do sleep 0.02; done");
    let local = {
        let (p, w, s) = (p.clone(), w.clone(), spec(&w, &hold, &[], &[]));
        tokio::spawn(async move {
            p.run_local(&assignment(10, 0, 1, &s), &s, &w, never(), |_| {})
                .await
        })
    };
    while !marks.join("started").exists() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The NNode was given its device 0; the ANode runs the task on its free device 1.
    let dir = temp("offload-device");
    let s = spec(&dir, "echo \"devices=$CUDA_VISIBLE_DEVICES\"", &[], &[]);
    let a = assignment(7, 0, 1, &s);
    let r = ship_plain(&client(l.addr, TOKEN), &a, &s, &dir).await;
    std::fs::write(marks.join("go"), b"").unwrap();
    assert!(r.success, "{r:?}");
    let (out, _) = hetsched_agent::launch::output_paths(&dir, &s, &a);
    assert_eq!(std::fs::read_to_string(out).unwrap(), "devices=1\n");
    assert_eq!(r.offload_devices, [1], "{r:?}");
    assert!(
        r.offload_started_ns > 0 && r.offload_started_ns != r.started_ns,
        "the ANode's start beside the NNode's: {r:?}"
    );
    assert!(local.await.unwrap().success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_transfer_is_retried_with_the_same_attempt() {
    // The ANode is not listening yet when the NNode ships: the call fails, and the retry (same
    // attempt) reaches the service once it is up.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = temp("retry");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/0.dat"), b"hello").unwrap();
    let s = spec(&dir, TRANSFORM, &["in/{index}.dat"], &["out/{index}.dat"]);
    let c = client(port, TOKEN);
    let shipped = tokio::spawn({
        let (s, dir) = (s.clone(), dir.clone());
        async move { ship_plain(&c, &assignment(5, 0, 3, &s), &s, &dir).await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let late_work = temp("late-anode");
    let p = pipeline(&late_work);
    let _l = AccelListener::bind(port, p, TOKEN, None).await.unwrap();
    let r = shipped.await.unwrap();
    assert!(r.success, "{r:?}");
    assert_eq!(r.attempt, 3);
    assert_eq!(std::fs::read(dir.join("out/0.dat")).unwrap(), b"HELLO");
    let (out, _) = hetsched_agent::launch::output_paths(&dir, &s, &assignment(5, 0, 3, &s));
    assert!(std::fs::read_to_string(out).unwrap().contains("attempt=3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_requester_goes_away_the_anode_kills_the_task_and_drops_its_result() {
    let (p, l, _w) = anode(1).await;
    let dir = temp("gone");
    let s = spec(&dir, "sleep 30; echo late > late.txt", &[], &["late.txt"]);
    let (kill_tx, kill_rx) = oneshot::channel();
    let c = client(l.addr, TOKEN);
    let shipped = tokio::spawn({
        let (s, dir) = (s.clone(), dir.clone());
        async move {
            offload::run(
                &c,
                &assignment(8, 0, 1, &s),
                &s,
                "nnode-1",
                &dir,
                false,
                kill_rx,
            )
            .await
        }
    });
    let gpus = hetsched_agent::detect::Gpus::init();
    // Wait until the task holds the device, then the NNode gives up (its task was killed). The
    // offload call and the task's start take well under a second, but more on a loaded machine:
    // up to 10 s.
    for _ in 0..1_000 {
        if p.state(&gpus, &[]).devices[0].busy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(p.state(&gpus, &[]).devices[0].busy);
    kill_tx.send(Kill::Server).unwrap();
    let r = shipped.await.unwrap();
    assert!(!r.success);
    // The ANode notices the call is gone and, once no re-send took the run over within its
    // grace (5 s), kills the task and frees the device, long before 30 s.
    for _ in 0..2_000 {
        if !p.state(&gpus, &[]).devices[0].busy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st = p.state(&gpus, &[]);
    assert!(!st.devices[0].busy, "the task still holds the device");
    assert!(!dir.join("late.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_speaks_tls_with_a_certificate_and_the_nnode_verifies_it() {
    let tls = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/tls");
    let read = |f: &str| std::fs::read(tls.join(f)).unwrap();
    let tls_work = temp("tls-anode");
    let p = pipeline(&tls_work);
    let l = AccelListener::bind(
        "127.0.0.1:0".parse().unwrap(),
        p,
        TOKEN,
        Some((read("server.pem"), read("server.key"))),
    )
    .await
    .unwrap();
    assert!(l.tls);
    let c = Client::new(
        Target {
            anode: "anode-1".into(),
            address: format!("https://{}", l.addr),
        },
        TOKEN,
        Some(&read("ca.pem")),
    )
    .unwrap();
    let dir = temp("tls-nnode");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/0.dat"), b"secret").unwrap();
    let s = spec(&dir, TRANSFORM, &["in/{index}.dat"], &["out/{index}.dat"]);
    let r = ship_plain(&c, &assignment(1, 0, 1, &s), &s, &dir).await;
    assert!(r.success, "{r:?}");
    assert_eq!(std::fs::read(dir.join("out/0.dat")).unwrap(), b"SECRET");
}

/// Ships `n` new tasks of `s` from one NNode, one after another (`concurrent` = false) or all at once,
/// and returns how long it took; every task must succeed.
async fn ship(c: &Client, s: &pb::TaskSpec, dir: &Path, n: u64, concurrent: bool) -> Duration {
    let t0 = std::time::Instant::now();
    if concurrent {
        let mut h = Vec::new();
        for _ in 0..n {
            let (c, s, dir) = (c.clone(), s.clone(), dir.to_path_buf());
            h.push(tokio::spawn(async move {
                ship_plain(&c, &assignment(fresh_task(), 0, 1, &s), &s, &dir).await
            }));
        }
        for x in h {
            let r = x.await.unwrap();
            assert!(r.success, "{r:?}");
        }
    } else {
        for _ in 0..n {
            let r = offload::run(
                c,
                &assignment(fresh_task(), 0, 1, s),
                s,
                "nnode-1",
                dir,
                false,
                never(),
            )
            .await;
            assert!(r.success, "{r:?}");
        }
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_overlaps_receiving_with_computing() {
    // Spec 01's pipeline: with 10 tasks whose input transfer and compute take about the same
    // time, the job's makespan is clearly below the sum of both stages. The stage times are
    // measured here, on this machine under its current load, and the compute is sized to the
    // measured transfer, so the comparison holds however fast the machine is.
    const TASKS: u64 = 10;
    let (_p, l, _w) = anode(1).await;
    let c = client(l.addr, TOKEN);
    let dir = temp("overlap");
    std::fs::write(dir.join("big.dat"), vec![7u8; 12 << 20]).unwrap();
    // Warm the connection up.
    ship(&c, &spec(&dir, "true", &[], &[]), &dir, 1, false).await;
    let mut rounds = Vec::new();
    for round in 0..3 {
        // Transfer stage alone: the inputs shipped one after another, nothing to compute.
        let transfer = ship(
            &c,
            &spec(&dir, "true", &["big.dat"], &[]),
            &dir,
            TASKS,
            false,
        )
        .await;
        // Compute stage: a `sleep` as long as one task's transfer took; measured as the transfer
        // stage is, the 10 tasks one after another without input (so it includes what starting
        // each task's processes costs on this machine now).
        let per_task = (transfer / TASKS as u32).max(Duration::from_millis(50));
        // Each task notes when its device time starts.
        let starts = temp("starts");
        let command = format!(
            "date +%s%N > {}/$HETSCHED_TASK_ID; sleep {:.3}",
            starts.display(),
            per_task.as_secs_f64()
        );
        let compute = ship(&c, &spec(&dir, &command, &[], &[]), &dir, TASKS, false).await;
        let _ = std::fs::remove_dir_all(&starts);
        std::fs::create_dir_all(&starts).unwrap();
        let both = spec(&dir, &command, &["big.dat"], &[]);
        let t0 = std::time::SystemTime::now();
        let pipelined = ship(&c, &both, &dir, TASKS, true).await;
        let first_start = std::fs::read_dir(&starts)
            .unwrap()
            .map(|e| {
                let ns: u64 = std::fs::read_to_string(e.unwrap().path())
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                std::time::UNIX_EPOCH + Duration::from_nanos(ns)
            })
            .min()
            .unwrap();
        let first = first_start.duration_since(t0).unwrap_or_default();
        let ratio = pipelined.as_secs_f64() / (transfer + compute).as_secs_f64();
        let first_frac = first.as_secs_f64() / transfer.as_secs_f64();
        eprintln!(
            "round {round}: transfer {transfer:?}, compute {compute:?}, pipelined {pipelined:?} \
             = {ratio:.2} of the sum; the first task computed after {first:?} \
             ({first_frac:.2} of the transfer stage)"
        );
        rounds.push((ratio, first_frac));
        // With the stages overlapping, the makespan is about 0.55 of the sum and the device starts
        // after about one task's transfer (0.1 of the stage); without, the makespan is the sum
        // and the device starts once all inputs have arrived together (≈ 1). A machine busy with
        // other work can spoil one round: one of three must show both.
        if ratio < 0.8 && first_frac < 0.5 {
            return;
        }
    }
    panic!(
        "the pipeline did not overlap: (makespan / sum of the stages, first device start / \
         transfer stage) per round: {rounds:?}"
    );
}

/// Whether this test process is root (`run_as_owner` needs it); says so when it is not.
fn root() -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        eprintln!("skipped: needs root");
    }
    root
}

/// With `run_as_owner` on both sides a user's offloaded task is its account's business: the
/// NNode reads its inputs and writes its outputs as the account, the ANode stages them in the
/// account's directory and runs the task there as the account, and cleans up after it. An
/// input the account may not read is never shipped, and an owner with no account on the ANode
/// is refused by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_run_as_owner_an_offloaded_task_runs_and_moves_its_files_as_its_account() {
    use std::os::unix::fs::MetadataExt;
    if !root() {
        return;
    }
    let (_p, l, work) = anode_with(1, true).await;
    let dir = temp("nnode-run-as");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/4.dat"), b"abc").unwrap();
    for path in [dir.clone(), dir.join("in"), dir.join("in/4.dat")] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    let nnode_work = temp("nnode-work-run-as");
    let mut s = spec(
        &dir,
        "mkdir -p out && tr a-z A-Z < in/{index}.dat > out/{index}.dat && id -un > who && pwd",
        &["in/{index}.dat"],
        &["out/{index}.dat", "who"],
    );
    s.run_as = "nobody".into();
    let run = |s: pb::TaskSpec, _dir: PathBuf, nnode_work: PathBuf| {
        let c = client(l.addr, TOKEN);
        async move {
            offload::run(
                &c,
                &assignment(7, 4, 1, &s),
                &s,
                "nnode-1",
                &nnode_work,
                true,
                never(),
            )
            .await
        }
    };
    let r = run(s.clone(), dir.clone(), nnode_work.clone()).await;
    assert!(r.success, "{r:?}");
    assert_eq!(std::fs::read(dir.join("out/4.dat")).unwrap(), b"ABC");
    assert_eq!(
        std::fs::read_to_string(dir.join("who")).unwrap(),
        "nobody\n"
    );
    for made in ["out", "out/4.dat", "who"] {
        assert_eq!(
            std::fs::metadata(dir.join(made)).unwrap().uid(),
            65534,
            "{made} is the account's"
        );
    }
    // It ran in the account's directory on the ANode, which is gone now.
    let out = std::fs::read_to_string(nnode_work.join("job-1/solve-4.1.out")).unwrap();
    let ran_in = work.join("users/nobody/accel");
    assert!(out.starts_with(ran_in.to_str().unwrap()), "{out}");
    assert_eq!(std::fs::read_dir(&ran_in).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(work.join("accel")).unwrap().count(), 0);

    // An input the account may not read (a link to a file of root's) is never shipped.
    let secret_dir = temp("secret");
    let secret = secret_dir.join("secret");
    std::fs::write(&secret, b"root only").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::remove_file(dir.join("in/4.dat")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("in/4.dat")).unwrap();
    let r = run(s.clone(), dir.clone(), nnode_work.clone()).await;
    assert!(!r.success);
    assert!(
        r.message.contains("input file `in/4.dat`")
            && r.message.contains("cannot be read by `nobody`"),
        "{}",
        r.message
    );

    // An owner with no account on the ANode: refused by it, naming the node and the account.
    std::fs::remove_file(dir.join("in/4.dat")).unwrap();
    std::fs::write(dir.join("in/4.dat"), b"abc").unwrap();
    let mut ghost = s.clone();
    ghost.run_as = "hetsched-ghost".into();
    let r = run(ghost, dir.clone(), nnode_work.clone()).await;
    assert!(!r.success);
    assert!(
        r.message.contains("no Unix account `hetsched-ghost`"),
        "{}",
        r.message
    );
}

/// Offload tickets (found by a security review: any holder of the agent token could run any
/// command as any account on an ANode): an offload runs only with the server's ticket for its
/// task, attempt, account, NNode and ANode. Without one, with a forged one, or with one for
/// another account, attempt or NNode, the ANode refuses it before staging anything — the
/// command never runs, and the first offload it does take is its first staging (`-0`) — and
/// the NNode reports the attempt interrupted (run again elsewhere, not failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offload_runs_only_with_the_servers_ticket_for_it_and_nothing_is_staged_without() {
    let (p, l, work) = anode(1).await;
    let dir = temp("tickets");
    let marker = dir.join("ran");
    let s = spec(
        &dir,
        &format!("touch {} && pwd", marker.display()),
        &[],
        &[],
    );
    let c = client(l.addr, TOKEN);
    let refused = |r: &pb::TaskResult, why: &str| {
        assert!(!r.success && r.interrupted, "{r:?}");
        assert_eq!(r.end(), pb::TaskEnd::Interrupted, "{r:?}");
        assert!(
            r.message
                .contains(&format!("offload of task 3 attempt 1 from nnode-1: {why}")),
            "{}",
            r.message
        );
    };
    // No ticket at all.
    let mut bare = assignment(3, 0, 1, &s);
    bare.offload_ticket.clear();
    refused(
        &ship_plain(&c, &bare, &s, &dir).await,
        "no ticket from the server",
    );
    // A forged ticket: the right fields under another key.
    let mut forged = assignment(3, 0, 1, &s);
    forged.offload_ticket = ticket::seal_offload(
        &[1; 32],
        &ticket::Offload {
            task_id: 3,
            attempt: 1,
            run_as: "",
            nnode: "nnode-1",
            anode: "anode-1",
            runs: ticket::offload_digest(&s, 0, None, 1),
        },
        ticket::Validity {
            issued_ms: now_ms(),
            expires_ms: now_ms() + 3_600_000,
            key_epoch: EPOCH,
        },
    );
    refused(
        &ship_plain(&c, &forged, &s, &dir).await,
        "ticket does not match",
    );
    // The server's ticket for the agent's own account, shipped to run as another one.
    let mut as_root = s.clone();
    as_root.run_as = "root".into();
    refused(
        &ship_plain(&c, &assignment(3, 0, 1, &s), &as_root, &dir).await,
        "ticket does not match",
    );
    // A ticket for another attempt of the task.
    let mut other_attempt = assignment(3, 0, 1, &s);
    other_attempt.offload_ticket = assignment(3, 0, 2, &s).offload_ticket;
    refused(
        &ship_plain(&c, &other_attempt, &s, &dir).await,
        "ticket does not match",
    );
    // The ticket of `nnode-1`, shipped by another NNode.
    let r = offload::run(
        &c,
        &assignment(3, 0, 1, &s),
        &s,
        "nnode-2",
        &dir,
        false,
        never(),
    )
    .await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message.contains("from nnode-2: ticket does not match"),
        "{}",
        r.message
    );
    assert!(!marker.exists(), "no refused offload ran");
    assert_eq!(std::fs::read_dir(work.join("accel")).unwrap().count(), 0);
    assert!(p.is_idle());

    // The server's ticket: it runs, in the first staging directory the ANode made.
    let r = ship_plain(&c, &assignment(3, 0, 1, &s), &s, &dir).await;
    assert!(r.success, "{r:?}");
    assert!(marker.exists());
    let out = std::fs::read_to_string(dir.join("job-1/solve-0.1.out")).unwrap();
    assert!(
        out.trim_end().ends_with("/nnode-1-3-1-0"),
        "the refused calls staged nothing: {out}"
    );
}

/// The ticket covers what runs (found by a security review: an NNode holding a genuine ticket
/// could ship any command with it, to run as that attempt's account): the server's ticket for
/// one command, shipped with another command, another environment or other files, is refused
/// before anything is staged — neither command runs — and the NNode reports the attempt
/// interrupted (the server runs it again with a fresh ticket). The command it was made for runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_for_one_command_runs_no_other_command_on_the_anode() {
    let (p, l, work) = anode(1).await;
    let dir = temp("ticket-command");
    let (genuine, other) = (dir.join("genuine"), dir.join("other"));
    let s = spec(&dir, &format!("touch {}", genuine.display()), &[], &[]);
    let a = assignment(6, 0, 1, &s);
    let c = client(l.addr, TOKEN);
    let mut command = s.clone();
    command.argv[2] = format!("touch {}", other.display());
    let mut env = s.clone();
    env.env.insert("LD_PRELOAD".into(), "/tmp/evil.so".into());
    let mut files = s.clone();
    files.inputs.push("in/extra".into());
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/extra"), b"x").unwrap();
    for (what, shipped) in [("command", command), ("env", env), ("inputs", files)] {
        let r = ship_plain(&c, &a, &shipped, &dir).await;
        assert!(!r.success && r.interrupted, "{what}: {r:?}");
        assert!(
            r.message.contains("ticket does not match"),
            "{what}: {}",
            r.message
        );
    }
    assert!(!other.exists() && !genuine.exists(), "nothing ran");
    assert_eq!(std::fs::read_dir(work.join("accel")).unwrap().count(), 0);
    assert!(p.is_idle());
    let r = ship_plain(&c, &a, &s, &dir).await;
    assert!(r.success, "{r:?}");
    assert!(genuine.exists() && !other.exists());
}

/// An ANode that holds no offload key (its agent has not heard from its server since it
/// started, or the server predates tickets) runs no offload: it answers `Unavailable`, the
/// NNode tries again and, if the ANode still holds none, reports the attempt interrupted. A key
/// that arrives meanwhile lets the next try through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anode_without_a_key_from_its_server_runs_no_offload_until_it_gets_one() {
    let work = temp("keyless");
    let p = Pipeline::start(
        "anode-1",
        hetsched_agent::launch::unnamed_devices(1),
        &work,
        Default::default(),
        DEFAULT_KILL_GRACE,
        false,
        Default::default(),
    )
    .unwrap();
    let l = AccelListener::bind("127.0.0.1:0".parse().unwrap(), p.clone(), TOKEN, None)
        .await
        .unwrap();
    let dir = temp("keyless-nnode");
    let marker = dir.join("ran");
    let s = spec(&dir, &format!("touch {}", marker.display()), &[], &[]);
    let c = client(l.addr, TOKEN);
    let r = ship_plain(&c, &assignment(4, 0, 1, &s), &s, &dir).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message.contains("holds no offload key from its server"),
        "{}",
        r.message
    );
    assert!(!marker.exists());
    assert_eq!(std::fs::read_dir(work.join("accel")).unwrap().count(), 0);

    // The key arrives while the NNode tries again.
    let shipping = tokio::spawn({
        let (c, s, dir) = (c.clone(), s.clone(), dir.clone());
        async move { ship_plain(&c, &assignment(4, 0, 2, &s), &s, &dir).await }
    });
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(p.set_offload_keys(&held_keys()), "a new key");
    assert!(!p.set_offload_keys(&held_keys()), "the same key again");
    let r = shipping.await.unwrap();
    assert!(r.success, "{r:?}");
    assert!(marker.exists());
}

/// An ANode serving on loopback whose offloads' inputs are received within `limits`.
async fn anode_limited(
    limits: hetsched_agent::dataflow::InputLimits,
) -> (Pipeline, AccelListener, Temp) {
    let work = temp("anode-limited");
    let p = Pipeline::start(
        "anode-1",
        hetsched_agent::launch::unnamed_devices(1),
        &work,
        Default::default(),
        DEFAULT_KILL_GRACE,
        false,
        limits,
    )
    .unwrap();
    p.set_offload_keys(&held_keys());
    let l = AccelListener::bind("127.0.0.1:0".parse().unwrap(), p.clone(), TOKEN, None)
        .await
        .unwrap();
    (p, l, work)
}

/// Waits (up to 5 s) until the ANode's staging directory `WORK/accel` is empty: a refused
/// call's directory goes right after its refusal is sent.
async fn staging_emptied(work: &Path) -> bool {
    for _ in 0..500 {
        if std::fs::read_dir(work.join("accel")).unwrap().count() == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Shipped inputs are bounded on the ANode as workflow fetches are on every agent (found by a
/// security review: an NNode, any holder of the agent token, could fill the ANode's disk): an
/// input larger than the ANode's `max_input_bytes`, or one that would take its disk below
/// `min_free_disk`, is refused before it is written whole; what was received is removed,
/// nothing runs, and the NNode reports the attempt interrupted (it runs again), not failed.
/// Inputs within the bounds go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_over_max_input_bytes_or_past_min_free_disk_is_refused_and_leaves_nothing() {
    use hetsched_agent::dataflow::{FreeSpace, InputLimits};
    let dir = temp("input-bounds");
    let marker = dir.join("ran");
    std::fs::write(dir.join("big.dat"), vec![b'x'; 600_000]).unwrap();
    std::fs::write(dir.join("small.dat"), vec![b'x'; 100_000]).unwrap();
    let s = |input: &str| spec(&dir, &format!("touch {}", marker.display()), &[input], &[]);
    let refused = |r: &pb::TaskResult, why: &str| {
        assert!(!r.success && r.interrupted, "{r:?}");
        assert_eq!(r.end(), pb::TaskEnd::Interrupted, "{r:?}");
        assert!(r.message.contains(why), "{}", r.message);
        assert!(!marker.exists(), "the command ran");
    };

    // `max_input_bytes`: 512 KiB per file.
    let (_p, l, work) = anode_limited(InputLimits {
        max_input_bytes: 512 << 10,
        min_free_disk: 0,
        free_space: FreeSpace::default(),
        ..InputLimits::default()
    })
    .await;
    let c = client(l.addr, TOKEN);
    let big = s("big.dat");
    refused(
        &ship_plain(&c, &assignment(1, 0, 1, &big), &big, &dir).await,
        "larger than this ANode's `max_input_bytes` (512.0 KiB)",
    );
    assert!(
        staging_emptied(&work).await,
        "the partial input was removed"
    );
    let small = s("small.dat");
    let r = ship_plain(&c, &assignment(2, 0, 1, &small), &small, &dir).await;
    assert!(r.success, "{r:?}");
    std::fs::remove_file(&marker).unwrap();

    // `min_free_disk`: 1 GiB kept, 300 kB above it free before the inputs, less what they
    // wrote (a stand-in: the test's disk is not filled for real).
    let floor = 1 << 30;
    let (_p, l, work) = anode_limited(InputLimits {
        max_input_bytes: u64::MAX,
        min_free_disk: floor,
        free_space: FreeSpace::with(move |staging| {
            let written: u64 = std::fs::read_dir(staging)?
                .map(|e| e.and_then(|e| e.metadata()).map_or(0, |m| m.len()))
                .sum();
            Ok((floor + 300_000).saturating_sub(written))
        }),
        ..InputLimits::default()
    })
    .await;
    let c = client(l.addr, TOKEN);
    refused(
        &ship_plain(&c, &assignment(3, 0, 1, &big), &big, &dir).await,
        "this ANode's disk has no room for the offload's inputs",
    );
    assert!(
        staging_emptied(&work).await,
        "the partial input was removed"
    );
    let r = ship_plain(&c, &assignment(4, 0, 1, &small), &small, &dir).await;
    assert!(r.success, "{r:?}");
}

/// Only the files a task declares are received (an NNode shipping its own client can send
/// any chunk after a genuine ticket): an undeclared one is refused before it is written, the
/// task does not run, and the refusal is marked so the NNode reports the attempt interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_input_file_is_refused_and_nothing_is_left() {
    use hetsched_proto::offload_reply::Part as Reply;
    use hetsched_proto::offload_request::Part as Request;
    let (p, l, work) = anode(1).await;
    let dir = temp("undeclared");
    let marker = dir.join("ran");
    let s = spec(
        &dir,
        &format!("touch {}", marker.display()),
        &["in.dat"],
        &[],
    );
    let a = assignment(5, 0, 1, &s);
    let endpoint = pb::endpoint(&format!("http://{}", l.addr), None).unwrap();
    let mut raw = pb::accel_client::AccelClient::with_interceptor(
        endpoint.connect_lazy(),
        pb::TokenInterceptor::new(TOKEN).unwrap(),
    );
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let send = |part| pb::OffloadRequest { part: Some(part) };
    tx.send(send(Request::Task(pb::OffloadTask {
        task_id: 5,
        attempt: 1,
        index: 0,
        spec: Some(s.clone()),
        node: "nnode-1".into(),
        gpus: 1,
        entry: None,
        ticket: a.offload_ticket.clone(),
    })))
    .await
    .unwrap();
    let mut replies = raw
        .offload(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("the ticket is the server's")
        .into_inner();
    let ready = replies.message().await.unwrap().and_then(|m| m.part);
    assert!(matches!(ready, Some(Reply::Ready(_))), "{ready:?}");
    for (path, data) in [("in.dat", b"ok".to_vec()), ("evil.bin", vec![1; 1000])] {
        tx.send(send(Request::Chunk(pb::FileChunk {
            path: path.into(),
            data,
            stream: 0,
        })))
        .await
        .unwrap();
    }
    let _ = tx
        .send(send(Request::InputsDone(pb::OffloadInputsDone {})))
        .await;
    let status = loop {
        match replies.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the call ended without a refusal"),
            Err(s) => break s,
        }
    };
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status.metadata().get(ticket::REFUSED_HEADER).is_some(),
        "marked: the NNode reports it interrupted"
    );
    assert!(
        status
            .message()
            .contains("`evil.bin` is not an input file the task declares"),
        "{}",
        status.message()
    );
    assert!(staging_emptied(&work).await, "the declared input went too");
    assert!(!marker.exists());
    assert!(p.is_idle());
}

/// A ticket starts runs for the time the server signed into it: past its expiry the ANode
/// refuses it before anything is staged — the command never runs — saying when it expired, and
/// the NNode reports the attempt interrupted (the server runs it again with a fresh ticket). An
/// expiry moved later by whoever holds the ticket makes it verify for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_ticket_starts_no_run_and_says_when_it_expired() {
    let (p, l, work) = anode(1).await;
    let dir = temp("expired");
    let marker = dir.join("ran");
    let s = spec(&dir, &format!("touch {}", marker.display()), &[], &[]);
    let c = client(l.addr, TOKEN);
    let task = fresh_task();
    let now = now_ms();
    let expired = ticketed_with(
        assignment(task, 0, 1, &s),
        &s,
        ticket::Validity {
            issued_ms: now - 3_700_000,
            expires_ms: now - 100_000,
            key_epoch: EPOCH,
        },
    );
    let r = ship_plain(&c, &expired, &s, &dir).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    let why = format!("offload of task {task} attempt 1 from nnode-1: ticket expired ");
    assert!(r.message.contains(&why), "{}", r.message);
    assert!(
        r.message.contains("issued 3600 s before it expired"),
        "{}",
        r.message
    );
    // Its expiry moved an hour later, the ticket is no ticket.
    let mut moved = expired.clone();
    let later = (now + 3_600_000).to_be_bytes();
    moved.offload_ticket[ticket::LEN + 8..ticket::LEN + 16].copy_from_slice(&later);
    let r = ship_plain(&c, &moved, &s, &dir).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(r.message.contains("ticket does not match"), "{}", r.message);
    assert!(!marker.exists(), "no expired ticket ran");
    assert_eq!(std::fs::read_dir(work.join("accel")).unwrap().count(), 0);
    assert!(p.is_idle());
    // The attempt with a ticket the server signed now runs.
    let r = ship_plain(&c, &assignment(task, 0, 1, &s), &s, &dir).await;
    assert!(r.success, "{r:?}");
    assert!(marker.exists());
}

/// The lines of `runs`: one per run of a test task that appends to it.
fn runs(file: &Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |t| t.lines().count())
}

/// A ticket runs its attempt once: the same ticket brought by two calls at once (a replay
/// beside the NNode's own call) starts one run, whose result one of them gets — the other is
/// refused, or gives up, as interrupted — and brought again once the attempt ended it is
/// refused, saying the attempt ran here. The task appends a line to a file at each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_ticket_runs_its_attempt_once() {
    let (p, l, _w) = anode(1).await;
    let dir = temp("replay");
    let file = dir.join("runs");
    let s = spec(
        &dir,
        &format!("echo run >> {}; sleep 0.5", file.display()),
        &[],
        &[],
    );
    let task = fresh_task();
    let a = assignment(task, 0, 1, &s);
    let (c1, c2) = (client(l.addr, TOKEN), client(l.addr, TOKEN));
    let (r1, r2) = tokio::join!(ship_plain(&c1, &a, &s, &dir), ship_plain(&c2, &a, &s, &dir));
    assert_eq!(runs(&file), 1, "one run for two calls: {r1:?} {r2:?}");
    assert!(
        r1.success || r2.success,
        "one gets the result: {r1:?} {r2:?}"
    );
    for r in [&r1, &r2] {
        assert!(r.success || r.interrupted, "{r:?}");
    }
    // The attempt ended: its ticket, brought again, runs nothing.
    let r = ship_plain(&c1, &a, &s, &dir).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message.contains(&format!(
            "offload of task {task} attempt 1 from nnode-1: this attempt ran here and its result \
             was sent (success); its files are gone; it does not run twice"
        )),
        "{}",
        r.message
    );
    assert_eq!(runs(&file), 1);
    assert!(p.is_idle());
}

/// ANode `anode-1` ([`pipeline`]) working in `work`, serving on loopback: the agent as it
/// (re)starts on its work directory.
async fn serve(work: &Path) -> (Pipeline, AccelListener) {
    let p = pipeline(work);
    let l = AccelListener::bind("127.0.0.1:0".parse().unwrap(), p.clone(), TOKEN, None)
        .await
        .expect("listener");
    (p, l)
}

/// An ANode's agent that restarted runs no attempt twice either: the attempts it ran are
/// recorded in its work directory. A ticket of an attempt that ran and ended there, replayed
/// after the restart (within its lifetime), is refused as before it; one of an attempt whose
/// run was under way when the agent stopped is refused saying the agent restarted during it
/// (the NNode reports it interrupted, and the server runs the task again as a new attempt).
/// Each task appends a line to a file at each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_replayed_after_the_anodes_agent_restarted_runs_nothing() {
    let work = temp("restarted-anode");
    let dir = temp("restarted");
    let (ran, cut) = (dir.join("ran"), dir.join("cut"));
    let quick = spec(&dir, &format!("echo run >> {}", ran.display()), &[], &[]);
    let a = assignment(fresh_task(), 0, 1, &quick);
    let (p, l) = serve(&work).await;
    let r = ship_plain(&client(l.addr, TOKEN), &a, &quick, &dir).await;
    assert!(r.success, "{r:?}");
    // A second attempt is running when the agent stops.
    let slow = spec(
        &dir,
        &format!("echo run >> {}; sleep 30", cut.display()),
        &[],
        &[],
    );
    let b = assignment(fresh_task(), 0, 1, &slow);
    let call = {
        let (c, b, slow, dir) = (
            client(l.addr, TOKEN),
            b.clone(),
            slow.clone(),
            dir.to_path_buf(),
        );
        tokio::spawn(async move { ship_plain(&c, &b, &slow, &dir).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while runs(&cut) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the slow task never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    call.abort();
    l.stop().await;
    drop(p);

    // The agent starts again on the same work directory; both tickets are replayed.
    let (p, l) = serve(&work).await;
    let c = client(l.addr, TOKEN);
    let r = ship_plain(&c, &a, &quick, &dir).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message.contains(&format!(
            "offload of task {} attempt 1 from nnode-1: this attempt ran here and its result \
             was sent (success); its files are gone; it does not run twice",
            a.task_id
        )),
        "{}",
        r.message
    );
    let r = ship_plain(&c, &b, &slow, &dir).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message.contains(&format!(
            "offload of task {} attempt 1 from nnode-1: this attempt was under way here when \
             this ANode's agent restarted",
            b.task_id
        )),
        "{}",
        r.message
    );
    assert_eq!(runs(&ran), 1, "the ended attempt did not run again");
    assert_eq!(runs(&cut), 1, "the cut-off attempt did not run again");
    assert!(p.is_idle());
}

/// A TCP relay between an NNode and its ANode whose connections can be cut, as a network that
/// breaks: new connections go through again.
struct Relay {
    addr: std::net::SocketAddr,
    links: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(to: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let links = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = links.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut from, _)) = listener.accept().await {
                let link = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut from, &mut out).await;
                    }
                });
                held.lock().unwrap().push(link);
            }
        });
        Self {
            addr,
            links,
            accept,
        }
    }

    /// Drops every connection through it, both ways.
    fn cut(&self) {
        for link in self.links.lock().unwrap().drain(..) {
            link.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// A transfer that breaks while the task runs on the ANode is sent again by the NNode, and the
/// re-send takes the run over: the task runs once, and its output, stdout and result reach the
/// NNode as if nothing broke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_a_broken_transfer_gets_the_result_of_the_one_run() {
    let (p, l, _w) = anode(1).await;
    let relay = Relay::start(l.addr).await;
    let dir = temp("resend");
    let file = dir.join("runs");
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(dir.join("in/0.dat"), b"hello").unwrap();
    let s = spec(
        &dir,
        &format!("echo run >> {}; sleep 1; {TRANSFORM}", file.display()),
        &["in/{index}.dat"],
        &["out/{index}.dat"],
    );
    let a = assignment(fresh_task(), 0, 1, &s);
    let c = client(relay.addr, TOKEN);
    let shipped = tokio::spawn({
        let (a, s, dir) = (a.clone(), s.clone(), dir.clone());
        async move { ship_plain(&c, &a, &s, &dir).await }
    });
    // Once the task runs (well under a second, up to 10 s on a loaded machine), the network
    // between the nodes breaks.
    let gpus = hetsched_agent::detect::Gpus::init();
    for _ in 0..1_000 {
        if runs(&file) == 1 && p.state(&gpus, &[]).devices[0].busy {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(runs(&file), 1, "the task started");
    relay.cut();
    let r = shipped.await.unwrap();
    assert!(r.success, "{r:?}");
    assert_eq!(runs(&file), 1, "the re-send ran nothing again");
    assert_eq!(std::fs::read(dir.join("out/0.dat")).unwrap(), b"HELLO");
    let (out, _) = hetsched_agent::launch::output_paths(&dir, &s, &a);
    let out = std::fs::read_to_string(out).unwrap();
    assert_eq!(out.matches("attempt=1").count(), 1, "{out}");
}

/// The server rotates an ANode's offload keys by epoch and tells it the previous, current and
/// next epochs' at every beat: a ticket runs under the key of the epoch it names while the
/// ANode holds it (a ticket of the previous epoch too), not under another epoch's key; once the
/// key was rotated out its tickets are refused, naming the epochs held; and a ticket of an
/// epoch whose key has not come yet waits for it (`Unavailable`), then is given up on as
/// interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_runs_under_the_key_of_its_epoch_while_the_anode_holds_it() {
    let (p, l, _w) = anode(1).await;
    let dir = temp("rotation");
    let s = spec(&dir, "true", &[], &[]);
    let c = client(l.addr, TOKEN);
    let (next, after) = ([10; 32], [11; 32]);
    assert!(p.set_offload_keys(&[
        offload_key(EPOCH, &KEY),
        offload_key(EPOCH + 1, &next),
        offload_key(EPOCH + 2, &after),
    ]));
    let ship = |key: [u8; 32], epoch: u64| {
        let now = now_ms();
        let valid = ticket::Validity {
            issued_ms: now,
            expires_ms: now + 3_600_000,
            key_epoch: epoch,
        };
        let a = ticketed_under(assignment(fresh_task(), 0, 1, &s), &s, &key, valid);
        let (c, s, dir) = (c.clone(), s.clone(), dir.clone());
        async move { ship_plain(&c, &a, &s, &dir).await }
    };
    let r = ship(KEY, EPOCH).await;
    assert!(r.success, "the previous epoch's ticket: {r:?}");
    let r = ship(next, EPOCH + 1).await;
    assert!(r.success, "the current epoch's ticket: {r:?}");
    let r = ship(KEY, EPOCH + 1).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(r.message.contains("ticket does not match"), "{}", r.message);
    // A day later the server gives the next three epochs' keys: the oldest is rotated out.
    assert!(p.set_offload_keys(&[
        offload_key(EPOCH + 1, &next),
        offload_key(EPOCH + 2, &after),
        offload_key(EPOCH + 3, &[12; 32]),
    ]));
    let r = ship(KEY, EPOCH).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message.contains(
            "ticket signed with the offload key of epoch 7, which this ANode no longer holds \
             (it holds epochs 8 to 10)"
        ),
        "{}",
        r.message
    );
    let r = ship([13; 32], EPOCH + 5).await;
    assert!(!r.success && r.interrupted, "{r:?}");
    assert!(
        r.message
            .contains("holds no offload key of epoch 12 from its server yet"),
        "{}",
        r.message
    );
    assert!(p.is_idle());
}
