//! Divisible jobs as a job kind of the one dispatch path, through the state's own types: their
//! ids come from the one sequence of every kind, a repeated submission key returns the stored job, their rows are
//! in the main store and written in the state's transaction — so a full disk rolls a chunk
//! hand-out back and pauses, and a restart finds every committed chunk — and no
//! `divisible.db` exists beside the store. After a restart, a chunk its agent no longer lists
//! is lost at the agent's first ask, and a unit's failures still count against its `retries`;
//! an ask held open while a chunk is in its grace is looked at again when the grace ends. The
//! agent of a node that does not work (declared dead, kept out at a restart) is refused, and one
//! closed to new work (drained, asked to stop) gets no new chunk. A chunk's `reason` says why
//! it failed, was lost or was stopped, in a task's words. A cancelled job's chunks out are
//! *stopping* — its wait, its purge and the jobs after it wait — until each one's agent no
//! longer lists it, reports its result, or is lost, across a restart too.

use hetsched_server::ServerConfig;
use hetsched_server::jobs::divisible::{ChunkRequest, ChunkResult};
use hetsched_server::state::types::Submission;
use hetsched_server::state::{PROBE_INTERVAL, State};
use hetsched_server::store::Store;
use std::path::Path;

use crate::common::Scratch;

fn open(d: &Path) -> State {
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state")
}

const JOB: &str = "[[divisible]]\nname = \"rows\"\nunits = 100\ncommand = \"echo {start} {end}\"\n";

fn ask(s: &mut State, name: &str) -> Result<Vec<(u64, u64)>, String> {
    ask_with(s, name, 1 << 30)
}

/// [`ask`] from an agent of `memory_bytes`.
fn ask_with(s: &mut State, name: &str, memory_bytes: u64) -> Result<Vec<(u64, u64)>, String> {
    s.on_next_chunk(ChunkRequest {
        name: name.into(),
        memory_bytes,
        incarnation: "i1".into(),
        holding: Vec::new(),
        room: true,
        attributes: Vec::new(),
        drained: false,
        time_left: None,
        capped: Vec::new(),
        disk_short: false,
    })
    .map(|r| r.orders.iter().map(|o| (o.job_id, o.chunk)).collect())
    .map_err(|e| e.to_string())
}

/// Registers two-core nodes `names`, whose agents each ask for a chunk and get none (no job).
fn join_agents(s: &mut State, names: &[&str]) {
    use hetsched_proto as pb;
    use hetsched_server::convert::Wire;
    for &name in names {
        s.register(pb::RegisterRequest {
            name: name.into(),
            cores: 2,
            memory_bytes: 1 << 30,
            identity: crate::common::IDENTITY.into(),
            ..Default::default()
        })
        .expect("register");
        assert!(ask(s, name).expect("asked").is_empty(), "no job yet");
    }
}

/// [`JOB`] as submitted from `/`.
fn rows() -> Submission {
    Submission {
        origin: "rows.toml".into(),
        text: JOB.into(),
        workdir: "/".into(),
        ..Default::default()
    }
}

/// A batch job of the admin's: `tasks` one-core tasks.
fn sweep(tasks: u32) -> Submission {
    Submission {
        origin: "sweep.toml".into(),
        text: format!(
            "[[application]]\nname = \"sim\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"true\"\n"
        ),
        workdir: "/".into(),
        ..Default::default()
    }
}

/// Chunk `chunk` of job `id` succeeded in 1 ms (after a 1 µs transfer).
fn success(id: u64, chunk: u64) -> ChunkResult {
    ChunkResult {
        job_id: id,
        chunk,
        success: true,
        message: String::new(),
        transfer_ns: 1_000,
        compute_ns: 1_000_000,
        reason: None,
    }
}

/// Reports chunk `chunk` of job `id` (in data directory `d`) done with an output: whether it
/// counted.
fn chunk_done(s: &mut State, d: &Path, id: u64, chunk: u64) -> bool {
    let tmp = d
        .join("divisible")
        .join(format!("job-{id}"))
        .join(format!("chunk-{chunk}.part"));
    std::fs::write(&tmp, b"0 4\n").expect("output");
    s.on_chunk_done(&success(id, chunk), Some(&tmp))
        .expect("recorded")
}

fn chunks(s: &State, id: u64) -> Vec<(u64, String)> {
    let j = s.get_job(id).expect("job");
    j.divisible
        .expect("a divisible view")
        .chunks
        .iter()
        .map(|c| (c.chunk, c.state.clone()))
        .collect()
}

#[test]
fn divisible_rows_are_in_the_states_transaction_and_survive_a_full_disk_and_a_restart() {
    let d = Scratch::new("divisible-kind", "job");
    let mut s = open(&d);
    let sub = || Submission {
        origin: "rows.toml".into(),
        text: JOB.into(),
        workdir: "/".into(),
        key: "key-1".into(),
        name: String::new(),
        divisible_input: Vec::new(),
        after: Vec::new(),
        after_any: Vec::new(),
        hold: false,
        begin_ms: None,
        after_notok: Vec::new(),
        after_corr: Vec::new(),
        singleton: false,
        after_start: Vec::new(),
        max_priority: None,
        task_room: None,
        cap: Default::default(),
        owner: String::new(),
    };
    let first = s.on_submit(sub()).expect("submitted");
    assert_eq!(first.job_id, 1, "job ids are one sequence across kinds");
    let again = s.on_submit(sub()).expect("a retry with the same key");
    assert_eq!((again.job_id, again.existing), (first.job_id, true));
    let id = first.job_id;
    assert_eq!(s.get_job(id).expect("job").state, "running");
    assert_eq!(
        s.list_jobs(0, 0).jobs.len(),
        1,
        "listed with every kind's jobs"
    );

    // Calibration: the agent gets chunk 0 and reports it done.
    let got = ask(&mut s, "a").expect("next chunk");
    assert_eq!(got, vec![(id, 0)]);
    assert!(chunk_done(&mut s, &d, id, 0), "recorded");
    let done = success(id, 0);
    assert!(
        !s.on_chunk_done(&done, None)
            .expect("a repeat is acknowledged"),
        "a chunk's success is recorded once"
    );

    // A full disk: handing out chunk 1 cannot be committed, so it is rolled back and dispatch
    // pauses; a result is refused (the agent retries) while paused.
    s.simulate_full_disk(true);
    assert!(ask(&mut s, "a").is_err(), "the hand-out is refused");
    assert!(s.is_paused());
    assert_eq!(chunks(&s, id), vec![(0, "done".to_string())], "rolled back");
    assert!(ask(&mut s, "a").expect("paused: no work").is_empty());

    // The disk has room again: chunk 1 goes out once the probe write succeeds.
    s.simulate_full_disk(false);
    std::thread::sleep(PROBE_INTERVAL);
    assert_eq!(ask(&mut s, "a").expect("next chunk"), vec![(id, 1)]);
    assert!(!s.is_paused());

    // A restart finds what was committed, from the main store.
    drop(s);
    let s = open(&d);
    assert_eq!(
        chunks(&s, id),
        vec![(0, "done".to_string()), (1, "out".to_string())]
    );
    assert_eq!(s.get_job(id).expect("job").counts.succeeded, 4);
    assert!(!d.join("divisible.db").exists(), "no store of its own");
}

/// A divisible job that `requires` an attribute plans its load on the agents whose nodes have
/// it: another agent asks and gets nothing, and one that registers again without the attribute
/// leaves the plan, the chunk it held planned again for the others.
#[test]
fn a_divisible_job_that_requires_an_attribute_hands_chunks_only_to_nodes_that_have_it() {
    use hetsched_proto as pb;
    use hetsched_server::convert::Wire;
    let d = Scratch::new("divisible-kind", "requirements");
    let mut s = open(&d);
    let register = |s: &mut State, name: &str, attributes: &[&str]| {
        s.register(pb::RegisterRequest {
            name: name.into(),
            cores: 2,
            memory_bytes: 1 << 30,
            identity: crate::common::IDENTITY.into(),
            attributes: attributes.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        })
        .expect("register");
    };
    register(&mut s, "plain", &[]);
    register(&mut s, "big-1", &["bigmem"]);
    register(&mut s, "big-2", &["bigmem", "ssd"]);
    // The three agents ask before the job comes: they are present when it is planned.
    for name in ["plain", "big-1", "big-2"] {
        assert!(ask(&mut s, name).expect("asked").is_empty(), "no job yet");
    }
    let submit = |s: &mut State, requires: &str| {
        s.on_submit(Submission {
            origin: "rows.toml".into(),
            text: format!("{JOB}requires = {requires}\n"),
            workdir: "/".into(),
            key: String::new(),
            name: String::new(),
            divisible_input: Vec::new(),
            after: Vec::new(),
            after_any: Vec::new(),
            hold: false,
            begin_ms: None,
            after_notok: Vec::new(),
            after_corr: Vec::new(),
            singleton: false,
            after_start: Vec::new(),
            max_priority: None,
            task_room: None,
            cap: Default::default(),
            owner: String::new(),
        })
    };
    let refused = submit(&mut s, "[\"bigmem\", \"fpga\"]").expect_err("no node has `fpga`");
    assert_eq!(
        refused.to_string(),
        "rows.toml:5:23: divisible[0].requires[1]: divisible load `rows` requires `fpga`, which no node has (attributes offered: bigmem, ssd)"
    );
    let id = submit(&mut s, "[\"bigmem\"]").expect("submitted").job_id;
    let workers = |s: &State| -> Vec<(String, bool)> {
        s.get_job(id)
            .expect("job")
            .divisible
            .expect("a divisible view")
            .workers
            .iter()
            .map(|w| (w.name.clone(), w.alive))
            .collect()
    };
    let both = vec![("big-1".to_string(), true), ("big-2".to_string(), true)];
    assert_eq!(workers(&s), both, "only the `bigmem` nodes are in the plan");
    assert!(
        ask(&mut s, "plain").expect("asked").is_empty(),
        "a node without `bigmem` gets no chunk"
    );
    let first = ask(&mut s, "big-1").expect("asked");
    assert_eq!(first, vec![(id, 0)], "the first worker calibrates");
    assert!(ask(&mut s, "plain").expect("asked").is_empty());
    assert_eq!(workers(&s), both, "an ask does not add `plain` to the plan");
    // big-1's agent comes back without the attribute: it leaves the plan, and the chunk it
    // held is lost, its units planned again for big-2.
    register(&mut s, "big-1", &["ssd"]);
    assert!(ask(&mut s, "big-1").expect("asked").is_empty());
    assert_eq!(chunks(&s, id), vec![(0, "lost".to_string())]);
    assert_eq!(
        workers(&s),
        vec![("big-1".to_string(), false), ("big-2".to_string(), true)]
    );
    assert_eq!(ask(&mut s, "big-2").expect("asked"), vec![(id, 1)]);
    assert_eq!(
        s.get_job(id).expect("job").pending_reason,
        "",
        "big-2 takes chunks"
    );
    // big-2 loses it too: no agent that asks can take the job's chunks, and the job says so.
    register(&mut s, "big-2", &[]);
    assert!(ask(&mut s, "big-2").expect("asked").is_empty());
    assert_eq!(
        s.get_job(id).expect("job").pending_reason,
        "no live agent can take its chunks (requires bigmem)"
    );
    assert!(s.get_job(id).expect("job").blocked);
}

/// `hetsched node drain` stops new work on a node for every kind: a drained agent gets no new
/// chunk (here the first ask, which would calibrate it), and its units go to the others; a
/// chunk a node holds when it is drained stays its own and counts when it finishes. Resumed, it
/// gets chunks again.
#[test]
fn a_drained_node_gets_no_new_chunk_and_finishes_the_one_it_holds() {
    let d = Scratch::new("divisible-kind", "drain");
    let mut s = open(&d);
    join_agents(&mut s, &["a", "b"]);
    s.on_drain("a", true).expect("drain");
    let id = s
        .on_submit(Submission {
            origin: "rows.toml".into(),
            text: JOB.into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("submitted")
        .job_id;
    for _ in 0..3 {
        assert!(ask(&mut s, "a").expect("asked").is_empty(), "drained");
    }
    let reason = |s: &State| s.get_job(id).expect("job").pending_reason;
    assert_eq!(reason(&s), "", "b takes its chunks");
    s.on_drain("b", true).expect("drain b");
    assert_eq!(
        reason(&s),
        "every agent that can take its chunks is drained: a, b (`hetsched node resume NAME`)"
    );
    // Resumed, b is told at once: its ask, held open while it was drained (an idle agent's
    // hold lasts minutes), is looked at again now, not when the hold ends.
    let (asks, _) = s.divisible_changes();
    s.on_drain("b", false).expect("resume b");
    assert!(
        asks.has_changed().expect("the kind lives"),
        "a resume wakes the asks held open"
    );
    let jd = d.join("divisible").join(format!("job-{id}"));
    let finish = |s: &mut State, chunk: u64| {
        let tmp = jd.join(format!("chunk-{chunk}.part"));
        std::fs::write(&tmp, b"x\n").expect("output");
        let r = ChunkResult {
            job_id: id,
            chunk,
            success: true,
            message: String::new(),
            transfer_ns: 1_000,
            compute_ns: 1_000_000,
            reason: None,
        };
        s.on_chunk_done(&r, Some(&tmp)).expect("recorded")
    };
    assert_eq!(
        ask(&mut s, "b").expect("asked"),
        vec![(id, 0)],
        "b calibrates"
    );
    // Resumed, a takes part again; b's chunks finish meanwhile, so the plan moves on.
    s.on_drain("a", false).expect("resume");
    let mut b_out = vec![0];
    let mut on_a = Vec::new();
    for _ in 0..20 {
        on_a.extend(ask(&mut s, "a").expect("asked"));
        if !on_a.is_empty() {
            break;
        }
        for chunk in b_out.drain(..) {
            finish(&mut s, chunk);
        }
        b_out.extend(ask(&mut s, "b").expect("asked").iter().map(|&(_, c)| c));
    }
    let Some(&(_, held)) = on_a.first() else {
        panic!("a resumed node gets chunks again: {:?}", chunks(&s, id));
    };
    // Drained while it holds a chunk: the chunk stays its own and counts (the reply says it).
    let drained = s.on_drain("a", true).expect("drain");
    assert_eq!(
        drained.chunks, 1,
        "the drain reply counts the chunk it holds"
    );
    assert!(ask(&mut s, "a").expect("asked").is_empty(), "drained");
    assert!(finish(&mut s, held), "the held chunk counts");
    assert!(
        chunks(&s, id).contains(&(held, "done".to_string())),
        "{:?}",
        chunks(&s, id)
    );
}

/// A job whose chunks carry input (100 units of 8 bytes) and that fails at its first failed
/// chunk (`retries = 0`).
fn with_input() -> Submission {
    Submission {
        origin: "rows.toml".into(),
        text: "[[divisible]]\nname = \"rows\"\nunits = 100\nunit_bytes = 8\nretries = 0\n\
               input = \"rows.txt\"\ncommand = \"cat {input} # {start} {end}\"\n"
            .into(),
        workdir: "/".into(),
        divisible_input: vec![b'x'; 800],
        ..Default::default()
    }
}

/// What agent `name` asks with room, saying whether its disk is below its floor: the chunks
/// it gets.
fn ask_short(s: &mut State, name: &str, disk_short: bool) -> Vec<(u64, u64)> {
    s.on_next_chunk(ChunkRequest {
        name: name.into(),
        memory_bytes: 1 << 30,
        incarnation: "i1".into(),
        room: true,
        disk_short,
        ..Default::default()
    })
    .expect("asked")
    .orders
    .iter()
    .map(|o| (o.job_id, o.chunk))
    .collect()
}

/// The agent's report of chunk `chunk` of job `id` whose input found no room on its disk (its
/// `NO_ROOM` prefix).
fn no_room(id: u64, chunk: u64) -> ChunkResult {
    ChunkResult {
        job_id: id,
        chunk,
        success: false,
        message: format!(
            "no room for inputs: chunk {chunk} of job {id} (400 B of input) on node a: this \
             node's disk is too full for it"
        ),
        transfer_ns: 0,
        compute_ns: 0,
        reason: None,
    }
}

/// A chunk whose input found no room on its agent's disk (`min_free_disk`) is lost for that
/// node's disk, not failed: a job with `retries = 0` goes on, the chunk's units are re-planned
/// onto the agent with room, and the agent whose asks say its disk is below its floor gets
/// none of the job's chunks until an ask says it has room again. With every agent short, the
/// job says why it waits. Before, the agent wrote a chunk's input with no floor at all.
#[test]
fn a_chunk_whose_input_finds_no_room_is_lost_for_the_nodes_disk_and_goes_elsewhere() {
    let d = crate::common::scratch("divisible-kind", "no-room");
    let mut s = open(&d);
    join_agents(&mut s, &["a", "b"]);
    let id = s.on_submit(with_input()).expect("submitted").job_id;
    let first = ask_short(&mut s, "a", false);
    assert_eq!(first, vec![(id, 0)], "a calibrates first");
    assert!(
        s.on_chunk_done(&no_room(id, 0), None).expect("reported"),
        "the report counts"
    );
    let j = s.get_job(id).expect("job");
    assert_eq!(
        j.state,
        "running",
        "not a failure: {}",
        j.divisible.expect("d").message
    );
    assert_eq!(chunks(&s, id), vec![(0, "lost".to_string())]);
    // Short, a gets nothing; b gets every chunk, chunk 0's units among them.
    let jd = d.join("divisible").join(format!("job-{id}"));
    for _ in 0..200 {
        assert!(
            ask_short(&mut s, "a", true).is_empty(),
            "a is below its floor"
        );
        let got = ask_short(&mut s, "b", false);
        for (_, chunk) in got {
            let tmp = jd.join(format!("chunk-{chunk}.part"));
            std::fs::write(&tmp, b"x\n").expect("output");
            assert!(
                s.on_chunk_done(&success(id, chunk), Some(&tmp))
                    .expect("recorded")
            );
        }
        if s.get_job(id).expect("job").state != "running" {
            break;
        }
    }
    let j = s.get_job(id).expect("job");
    let view = j.divisible.expect("divisible");
    assert_eq!(j.state, "completed", "{}", view.message);
    assert_eq!(view.units_done, 100);
    assert!(
        view.chunks
            .iter()
            .all(|c| c.worker == "b" || c.state == "lost"),
        "{:?}",
        view.chunks
    );
    // Another job while both disks are short: it says why it waits, and goes on once one has
    // room.
    let id = s.on_submit(with_input()).expect("submitted").job_id;
    assert!(ask_short(&mut s, "a", true).is_empty());
    assert!(ask_short(&mut s, "b", true).is_empty());
    assert_eq!(
        s.get_job(id).expect("job").pending_reason,
        "every agent that can take its chunks has its disk below its `min_free_disk`, with no \
         room for their input: a, b (it goes on once one has room)"
    );
    let mut got = Vec::new();
    for _ in 0..4 {
        got.extend(ask_short(&mut s, "b", false));
    }
    assert!(!got.is_empty(), "b has room again");
    assert_eq!(s.get_job(id).expect("job").pending_reason, "");
}

/// No room is a loss, bounded as every chunk loss is (`MAX_UNIT_LOSSES`): an agent whose disk
/// keeps filling as each chunk's input comes (its asks say it has room) does not hold the job
/// for ever; the job fails at the third loss of a unit, saying it was the disk.
#[test]
fn a_unit_whose_input_finds_no_room_three_times_fails_the_job_saying_so() {
    let d = crate::common::scratch("divisible-kind", "no-room-thrice");
    let mut s = open(&d);
    join_agents(&mut s, &["a"]);
    let id = s.on_submit(with_input()).expect("submitted").job_id;
    for n in 0..3 {
        let got = ask_short(&mut s, "a", false);
        assert_eq!(got.len(), 1, "loss {n}: {got:?}");
        assert_eq!(s.get_job(id).expect("job").state, "running", "loss {n}");
        s.on_chunk_done(&no_room(id, got[0].1), None)
            .expect("reported");
    }
    let j = s.get_job(id).expect("job");
    assert_eq!(j.state, "failed");
    let why = j.divisible.expect("divisible").message;
    assert!(
        why.contains("have been lost 3 times")
            && why.contains("the last loss: no room for its input on node `a`: chunk 2 of job"),
        "{why}"
    );
}

/// Agents started with a `time_limit` (inside a batch allocation): one whose time left is
/// shorter than the chunks' `time_limit` gets none of the job's chunks (it leaves the plan, as a
/// drained one), one without an end gets them; with only such agents, the job says why.
#[test]
fn an_agent_with_less_time_left_than_the_chunks_time_limit_gets_none() {
    use hetsched_proto as pb;
    use hetsched_server::convert::Wire;
    use hetsched_server::state::types::HeartbeatReport;
    let d = Scratch::new("divisible-kind", "left");
    let mut s = open(&d);
    let join = |s: &mut State, name: &str, left: Option<u64>| {
        let id = s
            .register(pb::RegisterRequest {
                identity: name.into(),
                name: name.into(),
                cores: 2,
                memory_bytes: 1 << 30,
                ..Default::default()
            })
            .expect("register")
            .node_id;
        s.on_heartbeat(HeartbeatReport {
            node_id: id,
            identity: name.into(),
            time_left: left.map(std::time::Duration::from_secs),
            ..Default::default()
        })
        .expect("beat");
    };
    join(&mut s, "ending", Some(30));
    let id = s
        .on_submit(Submission {
            origin: "rows.toml".into(),
            text: format!("{JOB}time_limit = \"10m\"\n"),
            workdir: "/".into(),
            ..Default::default()
        })
        .expect("submitted")
        .job_id;
    assert!(
        ask(&mut s, "ending").expect("asked").is_empty(),
        "30 s left, 10 m asked"
    );
    let reason = s.get_job(id).expect("job").pending_reason;
    assert!(
        reason.starts_with(
            "its chunks' time limit (10m) is longer than the time left on every agent that can \
             take them (at most "
        ) && reason.ends_with("s: their agents' `time_limit`)"),
        "{reason}"
    );
    join(&mut s, "staying", None);
    assert_eq!(ask(&mut s, "staying").expect("asked"), vec![(id, 0)]);
    assert_eq!(s.get_job(id).expect("job").pending_reason, "");
    assert!(
        ask(&mut s, "ending").expect("asked").is_empty(),
        "still too short"
    );
}

/// An idle agent's chunk ask is held open for minutes. One that got nothing because the job's
/// owner was at its cap on cores is looked at again as soon as the owner has a core free: when
/// a batch task of hers ends (a heartbeat's result), or when her cap is raised. Before, it waited
/// for the next change of divisible jobs or the end of its hold.
#[test]
fn a_chunk_ask_that_met_its_owners_cap_is_woken_when_a_core_frees() {
    use hetsched_server::state::CapChange;
    let d = crate::common::scratch("divisible-kind", "cap-wake");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("capped");
    join_agents(&mut s, &["a", "b"]);
    // Her batch task holds her one core.
    s.on_submit_as(sweep(1), "alice").expect("batch job");
    let sent: Vec<(u64, u32, bool)> = crate::common::beat(&mut s, 0, &[], &[])
        .assignments
        .iter()
        .map(|t| (t.task_id, t.attempt, true))
        .collect();
    assert_eq!(sent.len(), 1);
    let id = s.on_submit_as(rows(), "alice").expect("submitted").job_id;
    // A result that frees none of a capped owner's cores wakes nothing: no ask met a cap yet.
    let (asks, _) = s.divisible_changes();
    crate::common::beat(&mut s, 1, &[], &[]);
    assert!(!asks.has_changed().expect("the kind lives"));
    for agent in ["a", "b"] {
        assert!(ask(&mut s, agent).expect("asked").is_empty(), "alice's cap");
    }
    // Her batch task ends: the asks held open are looked at again, and one gets a chunk.
    let (asks, _) = s.divisible_changes();
    crate::common::beat(&mut s, 0, &[], &sent);
    assert!(
        asks.has_changed().expect("the kind lives"),
        "the end of her batch task wakes the asks that met her cap"
    );
    let got: Vec<(u64, u64)> = ["a", "b"]
        .iter()
        .flat_map(|agent| ask(&mut s, agent).expect("asked"))
        .collect();
    assert_eq!(
        got.len(),
        1,
        "one chunk, her one core: {:?}",
        chunks(&s, id)
    );
    // At her cap again; raised, the cap wakes the asks that met it.
    for agent in ["a", "b"] {
        let _ = ask(&mut s, agent).expect("asked");
    }
    let (asks, _) = s.divisible_changes();
    s.on_limit_user("alice", CapChange::cores(2))
        .expect("raised");
    assert!(
        asks.has_changed().expect("the kind lives"),
        "a raised cap wakes the asks that met it"
    );
}

/// A chunk being computed holds a core of its agent's node in the scheduler's view, charged to
/// its job's owner as a batch task's core is: batch tasks are not placed on it, it counts as the
/// owner's (its cap on cores, `user list`, fair-share usage), an agent whose chunk would take
/// the owner past its cap gets none until a core of the owner's is given back, and a restart
/// keeps the core held. (Until this test chunks booked nothing: a node computing one took a
/// batch task on every core, and a capped user's chunks ran beyond the cap.)
#[test]
fn a_chunk_being_computed_holds_a_core_charged_to_its_jobs_owner() {
    use hetsched_server::state::CapChange;
    let d = crate::common::scratch("divisible-kind", "core");
    let mut s = open(&d);
    s.on_add_user("alice", false).expect("alice");
    s.on_limit_user("alice", CapChange::cores(1))
        .expect("capped");
    join_agents(&mut s, &["a", "b"]);
    let id = s.on_submit_as(rows(), "alice").expect("submitted").job_id;
    let free = |s: &State| -> Vec<u32> { s.list_nodes().iter().map(|n| n.free_cores).collect() };
    assert_eq!(ask(&mut s, "a").expect("asked"), vec![(id, 0)]);
    assert_eq!(
        free(&s),
        vec![1, 2],
        "a's agent computes chunk 0 on one core"
    );
    assert_eq!(s.user_cores("alice"), 1, "the core is alice's");
    // Her cap is one core: b gets none of her chunks while a computes one.
    for _ in 0..3 {
        assert!(ask(&mut s, "b").expect("asked").is_empty(), "alice's cap");
    }
    assert_eq!(free(&s), vec![1, 2]);
    // Another job of hers, with no chunk out, says why it waits.
    let second = s.on_submit_as(rows(), "alice").expect("submitted").job_id;
    assert!(ask(&mut s, "b").expect("asked").is_empty(), "alice's cap");
    assert_eq!(
        s.get_job(second).expect("job").pending_reason,
        "its user's running work holds 1 of the 1 core the user may hold at once \
         (`hetsched user limit`)"
    );
    assert_eq!(
        s.get_job(id).expect("job").pending_reason,
        "",
        "it computes"
    );
    // A batch task of the admin's is not placed on the chunk's core.
    s.on_submit(sweep(4)).expect("batch job");
    let beat = crate::common::beat(&mut s, 0, &[], &[]);
    assert_eq!(beat.assignments.len(), 1, "one core of a is the chunk's");
    let sent: Vec<(u64, u32)> = beat
        .assignments
        .iter()
        .map(|t| (t.task_id, t.attempt))
        .collect();
    // A restart: the agent computes on; its core stays held and alice's.
    drop(s);
    let mut s = open(&d);
    assert_eq!(s.user_cores("alice"), 1);
    crate::common::beat(&mut s, 0, &sent, &[]);
    assert_eq!(free(&s)[0], 0, "the chunk's core and the batch task's");
    // Chunk 0 done: its core goes back, and alice's next chunk may go to b.
    assert!(chunk_done(&mut s, &d, id, 0), "recorded");
    assert_eq!(s.user_cores("alice"), 0);
    assert_eq!(free(&s)[0], 1, "the batch task's core only");
    // Under her cap again: one of her chunks goes out (to whichever agent the plan names), and
    // one only.
    let mut got = Vec::new();
    for _ in 0..5 {
        for agent in ["b", "a"] {
            got.extend(ask(&mut s, agent).expect("asked"));
        }
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1, "{:?}", chunks(&s, id));
    assert_eq!(s.user_cores("alice"), 1);
    assert_eq!(
        free(&s).iter().sum::<u32>(),
        2,
        "the batch task's core and the chunk's"
    );
}

/// A chunk handed to an agent whose cores batch tasks all hold takes the first core they free,
/// before the batch policy fills it again: the agent, which counts the chunk's core, would
/// otherwise hold the new task queued until the chunk is done.
#[test]
fn the_first_core_tasks_free_goes_to_a_chunk_short_of_its_core() {
    let d = crate::common::scratch("divisible-kind", "short");
    let mut s = open(&d);
    join_agents(&mut s, &["a"]);
    s.on_submit(sweep(6)).expect("batch job");
    let sent: Vec<(u64, u32)> = crate::common::beat(&mut s, 0, &[], &[])
        .assignments
        .iter()
        .map(|t| (t.task_id, t.attempt))
        .collect();
    assert_eq!(sent.len(), 2, "two tasks fill a's two cores");
    let id = s.on_submit(rows()).expect("submitted").job_id;
    assert_eq!(ask(&mut s, "a").expect("asked"), vec![(id, 0)]);
    // One task ends: its core is the chunk's, and no task takes it.
    let beat = crate::common::beat(&mut s, 0, &sent[1..], &[(sent[0].0, sent[0].1, true)]);
    assert!(beat.assignments.is_empty(), "{:?}", beat.assignments);
    assert_eq!(s.list_nodes()[0].free_cores, 0);
    // The chunk is done: its core goes to the next task.
    assert!(chunk_done(&mut s, &d, id, 0), "recorded");
    let beat = crate::common::beat(&mut s, 0, &sent[1..], &[]);
    assert_eq!(beat.assignments.len(), 1);
}

/// A unit larger than an agent's memory (`memory_per_unit`): that agent takes none of the job's
/// chunks (it was given one-unit chunks it could not hold, its memory shown as "unlimited"),
/// the job says why it waits when no agent can hold a unit, and a submission no live agent
/// could ever run is refused, naming the field.
#[test]
fn an_agent_that_cannot_hold_one_unit_takes_no_chunk_and_a_job_none_can_hold_is_refused() {
    let d = crate::common::scratch("divisible-kind", "unit-memory");
    let mut s = open(&d);
    join_agents(&mut s, &["small", "big"]);
    let big = |s: &mut State| ask_with(s, "big", 8 << 30).expect("asked");
    assert!(big(&mut s).is_empty(), "no job yet");
    let with_unit = |m: &str| Submission {
        text: format!("{JOB}memory_per_unit = \"{m}\"\n"),
        ..rows()
    };
    // 2 GiB a unit: the 1 GiB agent cannot hold one, the 8 GiB one can.
    let job = s.on_submit(with_unit("2GiB")).expect("accepted").job_id;
    assert!(
        ask(&mut s, "small").expect("asked").is_empty(),
        "small takes none"
    );
    assert!(!big(&mut s).is_empty(), "big takes its chunks");
    let info = s.get_job(job).expect("job");
    let workers = &info.divisible.as_ref().expect("divisible").workers;
    assert!(
        workers
            .iter()
            .all(|w| w.name == "big" && w.memory_units == 4),
        "{workers:?}"
    );
    // 16 GiB a unit: no live agent could ever hold one.
    let e = s
        .on_submit(with_unit("16GiB"))
        .expect_err("refused")
        .to_string();
    assert!(
        e.starts_with(
            "rows.toml:5:1: divisible[0].memory_per_unit: one unit needs 16.0 GiB, more than \
             any live agent"
        ) && e.contains("(the most: 8.0 GiB)"),
        "{e}"
    );
}

/// What agent `name` (process `incarnation`) asks holding `holding` (job, chunk): the chunks it
/// gets.
fn ask_holding(
    s: &mut State,
    name: &str,
    incarnation: &str,
    holding: &[(u64, u64)],
) -> Vec<(u64, u64)> {
    s.on_next_chunk(ChunkRequest {
        name: name.into(),
        memory_bytes: 1 << 30,
        incarnation: incarnation.into(),
        holding: holding
            .iter()
            .map(|&(job_id, chunk)| hetsched_server::jobs::divisible::ChunkKey { job_id, chunk })
            .collect(),
        room: true,
        attributes: Vec::new(),
        drained: false,
        time_left: None,
        capped: Vec::new(),
        disk_short: false,
    })
    .expect("asked")
    .orders
    .iter()
    .map(|o| (o.job_id, o.chunk))
    .collect()
}

/// The reviewer's stall: chunks out when the server stops are rebuilt as out; an agent
/// restarted meanwhile (another process: it lists nothing) and one whose reply was lost in the
/// crash (the chunk was committed, never received) lose those chunks at their first ask after
/// the restart — not after the 2 s grace a fresh send gets, which let an agent listing nothing
/// be held open for 5 minutes with its chunk believed out. A chunk still listed stays out.
#[test]
fn chunks_out_at_a_restart_that_their_agents_no_longer_list_are_lost_at_their_first_ask() {
    let d = crate::common::scratch("divisible-kind", "restart-lost");
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a", "b"]);
        let id = s.on_submit(rows()).expect("submitted").job_id;
        // Calibration goes a, b, a, b.
        assert_eq!(ask_holding(&mut s, "a", "a-1", &[]), vec![(id, 0)]);
        assert_eq!(ask_holding(&mut s, "b", "b-1", &[]), vec![(id, 1)]);
        // Chunk 2 is committed out to a; the reply carrying it dies with the server.
        assert_eq!(ask_holding(&mut s, "a", "a-1", &[(id, 0)]), vec![(id, 2)]);
        id
    };
    let mut s = open(&d);
    let states = |s: &State| chunks(s, id).into_iter().take(3).collect::<Vec<_>>();
    assert_eq!(
        states(&s),
        vec![(0, "out".into()), (1, "out".into()), (2, "out".into())]
    );
    // At once (well within 2 s of the restart): b, a new process, holds nothing; a holds chunk
    // 0 but never got chunk 2.
    ask_holding(&mut s, "b", "b-2", &[]);
    ask_holding(&mut s, "a", "a-1", &[(id, 0)]);
    assert_eq!(
        states(&s),
        vec![
            (0, "out".into()),
            (1, "lost".into()),
            (2, "undelivered".into())
        ],
        "lost (b) and never received (a) at the agents' first asks after the restart"
    );
}

/// A server killed just after handing a chunk out, again and again: the agent process it was
/// sent to asks again without it, so the chunk never arrived and its units count no loss. Before,
/// each such chunk was lost with its worker, and the third loss of unit 0 failed the job as if it
/// had taken its agent down three times.
#[test]
fn chunks_never_delivered_across_server_restarts_count_no_loss() {
    let d = crate::common::scratch("divisible-kind", "undelivered");
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a"]);
        let id = s.on_submit(rows()).expect("submitted").job_id;
        assert_eq!(ask_holding(&mut s, "a", "a-1", &[]), vec![(id, 0)]);
        id
    };
    // Four times: the reply dies with the server; the same process asks again, holding nothing,
    // and gets the units again (the lowest go out first).
    for round in 1..=4u64 {
        let mut s = open(&d);
        assert_eq!(
            ask_holding(&mut s, "a", "a-1", &[]),
            vec![(id, round)],
            "round {round}"
        );
        let j = s.get_job(id).expect("job");
        let div = j.divisible.expect("divisible");
        assert_eq!(j.state, "running", "round {round}: {}", div.message);
        assert_eq!(div.chunks[round as usize].start, 0, "unit 0 goes out again");
    }
    let s = open(&d);
    let states: Vec<String> = chunks(&s, id).into_iter().map(|(_, st)| st).collect();
    assert_eq!(
        states,
        [
            "undelivered",
            "undelivered",
            "undelivered",
            "undelivered",
            "out"
        ]
    );
    assert_eq!(s.get_job(id).expect("job").state, "running");
}

/// An agent whose reply carrying a chunk was lost asks again at once, listing nothing: within
/// the chunk's grace (the reply may still be on its way) that says nothing of the chunk, and,
/// holding no chunk, the agent's ask is held open for as long as it asked (here 5 minutes).
/// When the grace ends the held ask is looked at again and the chunk is declared undelivered
/// (the agent process it was sent to asks without it) then —
/// before, nothing looked at it until the hold ended, and the job stalled for its length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_held_while_a_chunk_is_in_its_grace_is_looked_at_again_when_the_grace_ends() {
    use hetsched_proto as pb;
    use hetsched_proto::client_client::ClientClient;
    use hetsched_proto::divisible_client::DivisibleClient;
    use hetsched_server::jobs::divisible::GRACE;
    use std::time::{Duration, Instant};
    let d = crate::common::scratch("divisible-kind", "grace-held");
    let (server, channel) = crate::common::serve(ServerConfig {
        data_dir: d.to_path_buf(),
        // b, silent after its one call, stays in the plan throughout.
        dead_timeout: hetsched_core::input::Duration(60_000_000_000),
        ..Default::default()
    })
    .await;
    let mut api =
        ClientClient::with_interceptor(channel.clone(), crate::common::client_token(&server));
    let agent =
        DivisibleClient::with_interceptor(channel.clone(), crate::common::agent_token(&server));
    let ask = |name: &str, room: bool, hold_ms: u64| {
        let mut agent = agent.clone();
        let req = pb::NextChunkRequest {
            name: name.into(),
            identity: crate::common::IDENTITY.into(),
            memory_bytes: 1 << 30,
            incarnation: format!("{name}-1"),
            room,
            hold_ms,
            ..Default::default()
        };
        tokio::spawn(async move { agent.next_chunk(req).await.map(|r| r.into_inner()) })
    };
    // a and b call before the job comes, so both are in its plan (calibration: a, b, a, b);
    // without room, they are answered at once, and b does not ask again.
    for name in ["a", "b"] {
        let _registered = crate::common::agent_of(&server, &channel, name, 2, 1 << 30).await;
        ask(name, false, 0).await.expect("task").expect("answered");
    }
    let id = api
        .submit(pb::SubmitRequest {
            origin: "rows.toml".into(),
            text: JOB.into(),
            workdir: "/".into(),
            ..Default::default()
        })
        .await
        .expect("submitted")
        .into_inner()
        .job_id;
    // Before the ask: the chunk's grace starts after this.
    let sent = Instant::now();
    let first = ask("a", true, 0).await.expect("task").expect("answered");
    assert_eq!(
        first.orders.iter().map(|o| o.chunk).collect::<Vec<_>>(),
        vec![0]
    );
    // a never got that reply: it asks again holding nothing, for as long as the server likes.
    let held = ask("a", true, 300_000);
    let state = |api: &mut ClientClient<_>| {
        let mut api = api.clone();
        async move {
            let j = api
                .get_job(pb::GetJobRequest {
                    job_id: id,
                    wait_ms: 0,
                })
                .await
                .expect("job")
                .into_inner();
            j.divisible.expect("divisible").chunks[0].state.clone()
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(state(&mut api).await, "out", "within its grace");
    let mut lost_after = None;
    while sent.elapsed() < GRACE + Duration::from_secs(8) {
        // Undelivered, not lost: the same agent process asks without it.
        if state(&mut api).await == "undelivered" {
            lost_after = Some(sent.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lost_after = lost_after
        .expect("chunk 0 declared undelivered when its grace ended, not at the hold's end");
    assert!(
        lost_after >= GRACE && lost_after < GRACE + Duration::from_secs(2),
        "lost {lost_after:?} after it was sent"
    );
    assert!(!held.is_finished(), "a's ask is still held: b's turn");
    server.stop().await.expect("stops");
}

/// `retries = 1`: a unit runs once and again once. Its chunk failed before a restart; after
/// it, the units are planned anew, and the first failure of a chunk holding the same unit
/// fails the job — the failure stored before the restart still counts.
#[test]
fn a_units_failures_before_a_restart_count_against_its_retries_after_it() {
    let d = crate::common::scratch("divisible-kind", "retries-restart");
    let failed = |id: u64, chunk: u64| ChunkResult {
        success: false,
        message: "exited with exit status: 3".into(),
        ..success(id, chunk)
    };
    let with_retries = Submission {
        text: format!("{JOB}retries = 1\n"),
        ..rows()
    };
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a"]);
        let id = s.on_submit(with_retries).expect("submitted").job_id;
        assert_eq!(ask(&mut s, "a").expect("asked"), vec![(id, 0)]);
        assert!(s.on_chunk_done(&failed(id, 0), None).expect("recorded"));
        assert_eq!(
            s.get_job(id).expect("job").state,
            "running",
            "one retry left"
        );
        id
    };
    let mut s = open(&d);
    let (start, end) = {
        let j = s.get_job(id).expect("job");
        let c = &j.divisible.expect("divisible").chunks[0];
        (c.start, c.end)
    };
    // The next chunk holding a unit of chunk 0 fails too.
    let next = ask(&mut s, "a").expect("asked");
    assert_eq!(next.len(), 1);
    let chunk = next[0].1;
    let j = s.get_job(id).expect("job");
    let c = j.divisible.expect("divisible").chunks[chunk as usize].clone();
    assert!(
        c.start < end && start < c.end,
        "{c:?} holds a unit of {start}..{end}"
    );
    assert!(s.on_chunk_done(&failed(id, chunk), None).expect("recorded"));
    let j = s.get_job(id).expect("job");
    assert_eq!(
        j.state, "failed",
        "its one retry was spent before the restart"
    );
    assert_eq!(
        j.divisible.expect("divisible").message,
        format!(
            "chunk {chunk} (units {}..{}) failed: exited with exit status: 3",
            c.start, c.end
        )
    );
}

/// A job cancelled while a unit that ran and failed waited for its retry counts that unit
/// failed, the units it never ran cancelled, and its cancel says it cancelled those only (it
/// counted every unit not done as cancelled, the failed one included).
#[test]
fn a_cancelled_jobs_unit_that_ran_and_failed_stays_failed() {
    let d = crate::common::scratch("divisible-kind", "cancel-after-failure");
    let mut s = open(&d);
    join_agents(&mut s, &["a"]);
    let id = s
        .on_submit(Submission {
            text: format!("{JOB}retries = 1\n"),
            ..rows()
        })
        .expect("submitted")
        .job_id;
    assert_eq!(ask(&mut s, "a").expect("asked"), vec![(id, 0)]);
    let failed = ChunkResult {
        success: false,
        message: "exited with exit status: 3".into(),
        ..success(id, 0)
    };
    assert!(s.on_chunk_done(&failed, None).expect("recorded"));
    let ran = {
        let j = s.get_job(id).expect("job");
        assert_eq!(j.state, "running", "one retry left");
        let c = &j.divisible.expect("divisible").chunks[0];
        c.end - c.start
    };
    let cancelled = s.on_cancel(id).expect("cancelled");
    let j = s.get_job(id).expect("job");
    assert_eq!(j.state, "cancelled");
    assert_eq!(
        (j.counts.succeeded, j.counts.failed, j.counts.cancelled),
        (0, ran, 100 - ran)
    );
    assert_eq!(
        cancelled,
        100 - ran,
        "the cancel counts the units it stopped"
    );
}

/// An agent whose node has registered is a worker of a job submitted before its first ask: its
/// asks are refused until it registers (the identity check), and a `static` job planned on the
/// agents that had asked gave it nothing (the CLI test of a restart while chunks are out timed
/// out on that under load).
#[test]
fn a_registered_agent_that_has_not_asked_yet_is_planned_for() {
    use hetsched_proto as pb;
    use hetsched_server::convert::Wire;
    let d = crate::common::scratch("divisible", "registered-first");
    let mut s = open(&d);
    join_agents(&mut s, &["a"]);
    s.register(pb::RegisterRequest {
        name: "b".into(),
        cores: 2,
        memory_bytes: 1 << 30,
        identity: crate::common::IDENTITY.into(),
        ..Default::default()
    })
    .expect("register");
    let sub = Submission {
        text: JOB.replace("units = 100", "units = 40\nalgo = \"static\""),
        ..rows()
    };
    s.on_submit(sub).expect("submitted");
    assert!(!ask(&mut s, "a").expect("a asks").is_empty());
    assert!(
        !ask(&mut s, "b").expect("b asks").is_empty(),
        "b is one of the two workers of the static split"
    );
}

/// A chunk whose command takes its agent down (the agent restarts, another process, holding
/// nothing) is lost, and its units are planned again — onto the same restarted agent here. A
/// loss is not a failure (`retries` is 0, and an agent's restart fails no job), but the third
/// loss of a unit fails the job, naming the chunk and its worker; the losses stored before a
/// server restart still count after it. Before, such a chunk ran again for ever.
#[test]
fn a_unit_lost_with_its_agent_three_times_fails_the_job_across_a_server_restart() {
    let d = crate::common::scratch("divisible-kind", "losses");
    // Agent `a`'s process `n` asks holding nothing: the chunks it gets.
    let restarted = |s: &mut State, n: u32| ask_holding(s, "a", &format!("a-{n}"), &[]);
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a"]);
        let id = s.on_submit(rows()).expect("submitted").job_id;
        assert_eq!(restarted(&mut s, 1), vec![(id, 0)]);
        // Twice, the agent comes back as a new process: chunk 0's units are lost, and go
        // out again.
        assert_eq!(restarted(&mut s, 2), vec![(id, 1)]);
        assert_eq!(restarted(&mut s, 3), vec![(id, 2)]);
        let states: Vec<String> = chunks(&s, id).into_iter().map(|(_, st)| st).collect();
        assert_eq!(states, ["lost", "lost", "out"]);
        assert_eq!(s.get_job(id).expect("job").state, "running", "two losses");
        id
    };
    // After a server restart, the agent restarts once more: unit 0's third loss.
    let mut s = open(&d);
    let (start, end) = {
        let j = s.get_job(id).expect("job");
        let c = &j.divisible.expect("divisible").chunks[2];
        (c.start, c.end)
    };
    assert_eq!(start, 0, "the lowest units go out first");
    assert!(restarted(&mut s, 4).is_empty(), "the job failed");
    let j = s.get_job(id).expect("job");
    assert_eq!(j.state, "failed");
    let why = j.divisible.expect("divisible").message;
    assert!(
        why.starts_with(&format!(
            "chunk 2 (units {start}..{end}) was lost with its worker `a`: some of its units have been lost 3 times"
        )),
        "{why}"
    );
}

/// An agent computes two chunks at once, so its chunks end out of number order, and the workers'
/// estimates weigh the latest chunks most: a restart replays the finished chunks' times in the
/// order their successes were recorded, so the estimates (and the plans made with them) are
/// those before it. Before, they were replayed in chunk-number order and a worker's speed and
/// latency read otherwise after every restart (the CLI chaos test saw it).
#[test]
fn a_restart_rebuilds_the_workers_estimates_from_chunks_in_the_order_they_ended() {
    let d = crate::common::scratch("divisible-kind", "estimate-order");
    let estimates = |s: &State, id: u64| -> Vec<(String, f64, f64, f64)> {
        let j = s.get_job(id).expect("job");
        let v = j.divisible.expect("divisible");
        v.workers
            .iter()
            .map(|w| (w.name.clone(), w.speed, w.compute_latency, v.lower_bound_s))
            .collect()
    };
    let (id, before) = {
        let mut s = open(&d);
        join_agents(&mut s, &["a"]);
        let id = s.on_submit(rows()).expect("submitted").job_id;
        // Up to two chunks out at once (the calibration's are two), reported in reverse number
        // order, in a time that is not a line in their sizes (so that the order shows in the
        // fit).
        let mut reported = 0;
        for _ in 0..4 {
            let mut got = ask(&mut s, "a").expect("a chunk");
            got.extend(ask(&mut s, "a").expect("a second chunk"));
            for &(job, chunk) in got.iter().rev() {
                let c = s
                    .get_job(job)
                    .expect("job")
                    .divisible
                    .expect("divisible")
                    .chunks[chunk as usize]
                    .clone();
                let units = c.end - c.start;
                let tmp = d
                    .join("divisible")
                    .join(format!("job-{job}"))
                    .join(format!("chunk-{chunk}.part"));
                std::fs::write(&tmp, b"x\n").expect("output");
                let result = ChunkResult {
                    job_id: job,
                    chunk,
                    success: true,
                    message: String::new(),
                    transfer_ns: 1_000,
                    compute_ns: 2_000_000 + units * 1_000_000 * (1 + chunk % 3),
                    reason: None,
                };
                assert!(s.on_chunk_done(&result, Some(&tmp)).expect("recorded"));
                reported += 1;
            }
        }
        assert!(reported >= 3, "{reported}");
        (id, estimates(&s, id))
    };
    let s = open(&d);
    assert_eq!(
        estimates(&s, id),
        before,
        "the estimates read the same after a restart"
    );
}

/// A job's workers as `hetsched job N` lists them, but for whether each is alive now (a
/// restart takes a worker that holds nothing for gone until it asks again).
fn listed_workers(s: &State, id: u64) -> Vec<(String, u64, u64, u32)> {
    let j = s.get_job(id).expect("job");
    j.divisible
        .expect("divisible")
        .workers
        .iter()
        .map(|w| (w.name.clone(), w.memory_units, w.units_done, w.chunks_done))
        .collect()
}

/// A job's workers are listed in the order they joined it, each with the units its memory
/// holds, and a restart lists the same: before, the rebuilt master took its workers from the
/// chunk rows alone, so a worker that joined but never got a chunk went missing, the others
/// came back in the order of their first chunks, and every one without its `memory_units`.
#[test]
fn a_restart_lists_a_divisible_jobs_workers_as_before_it_chunk_or_none() {
    let d = crate::common::scratch("divisible-kind", "workers-restart");
    let (id, before) = {
        let mut s = open(&d);
        join_agents(&mut s, &["a", "b", "c"]);
        let sub = Submission {
            text: format!("{JOB}memory_per_unit = \"4KiB\"\n"),
            ..rows()
        };
        let id = s.on_submit(sub).expect("submitted").job_id;
        // `c` asks first, then `a`; `b` asks with no room (it holds two chunks of some other
        // work) and gets nothing.
        let mut got = ask(&mut s, "c").expect("c asks");
        got.extend(ask(&mut s, "a").expect("a asks"));
        assert!(!got.is_empty(), "chunks went out");
        let full = s
            .on_next_chunk(ChunkRequest {
                name: "b".into(),
                memory_bytes: 1 << 30,
                incarnation: "i1".into(),
                holding: Vec::new(),
                room: false,
                attributes: Vec::new(),
                drained: false,
                time_left: None,
                capped: Vec::new(),
                disk_short: false,
            })
            .expect("b asks");
        assert!(full.orders.is_empty(), "b has no room");
        for (job, chunk) in got {
            assert!(chunk_done(&mut s, &d, job, chunk));
        }
        let before = listed_workers(&s, id);
        let names: Vec<&str> = before.iter().map(|w| w.0.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"], "{before:?}");
        assert!(before.iter().all(|w| w.1 == (1 << 30) / 4096), "{before:?}");
        (id, before)
    };
    let s = open(&d);
    assert_eq!(
        listed_workers(&s, id),
        before,
        "the workers read the same after a restart"
    );
}

/// The agent of a node declared dead (its heartbeats stopped) that asks for chunks before a
/// heartbeat brings its node back is refused, naming the node and why, and is handed nothing:
/// a chunk handed to it then would be re-planned only when the node is declared dead again.
/// Its next heartbeat brings the node back, and its asks are heard again. Before, the ask was
/// answered with a chunk as a live node's.
#[test]
fn a_node_declared_dead_gets_no_chunk_until_a_heartbeat_brings_it_back() {
    let d = crate::common::scratch("divisible-kind", "dead-node");
    let mut s = open(&d);
    join_agents(&mut s, &["a", "b"]);
    let (a, b) = (0, 1);
    std::thread::sleep(crate::common::SILENCE);
    crate::common::beat(&mut s, b, &[], &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let id = s.on_submit(rows()).expect("submitted").job_id;
    let refused = ask(&mut s, "a").expect_err("a dead node's agent is refused");
    assert_eq!(
        refused,
        "node `a` takes no work now: it was declared dead (its heartbeats stopped): a \
         heartbeat brings it back"
    );
    assert_eq!(
        ask(&mut s, "b").expect("asked"),
        vec![(id, 0)],
        "b calibrates"
    );
    assert_eq!(
        chunks(&s, id),
        vec![(0, "out".to_string())],
        "nothing out on a"
    );
    let job = s.get_job(id).expect("job").divisible.expect("divisible");
    assert!(
        job.chunks.iter().all(|c| c.worker != "a"),
        "{:?}",
        job.chunks
    );
    // Its heartbeat brings it back: it is a worker again.
    crate::common::beat(&mut s, a, &[], &[]);
    assert!(
        gets_a_chunk(&mut s, &d, id, "a", "b"),
        "back, a gets chunks again: {:?}",
        chunks(&s, id)
    );
}

/// Whether agent `name` gets a chunk of job `id` (data directory `d`) while agent `other`
/// finishes the chunks it is handed, so that the plan moves on to rounds with `name` in them.
fn gets_a_chunk(s: &mut State, d: &Path, id: u64, name: &str, other: &str) -> bool {
    for _ in 0..20 {
        if !ask(s, name).expect("asked").is_empty() {
            return true;
        }
        let out: Vec<u64> = chunks(s, id)
            .into_iter()
            .filter(|(_, state)| state == "out")
            .map(|(c, _)| c)
            .collect();
        for chunk in out {
            chunk_done(s, d, id, chunk);
        }
        ask(s, other).expect("asked");
    }
    false
}

/// A node kept out at a restart (its stored row past a registration bound) takes no chunk:
/// its agent's asks are refused, saying it must register again, until it does. Before, its
/// asks were answered with chunks although its heartbeats were told to register and the node
/// was listed not alive.
#[test]
fn a_node_kept_out_at_a_restart_gets_no_chunk_until_its_agent_registers_again() {
    let d = crate::common::scratch("divisible-kind", "kept-out");
    {
        let mut s = open(&d);
        join_agents(&mut s, &["big", "ok"]);
    }
    crate::common::store_memory_past_the_bound(&d, &["big"]);
    let mut s = open(&d);
    let id = s.on_submit(rows()).expect("submitted").job_id;
    let refused = ask(&mut s, "big").expect_err("a kept-out node's agent is refused");
    assert!(
        refused.starts_with(
            "node `big` takes no work now: it is kept out since the server's restart, its \
             stored description being past a registration bound (memory_bytes is \
             18446744073709551615;"
        ) && refused.ends_with("its agent must register again"),
        "{refused}"
    );
    assert_eq!(ask(&mut s, "ok").expect("asked"), vec![(id, 0)]);
    // Its agent registers again, within bounds: its asks are heard.
    join_agents_again(&mut s, "big");
    assert!(
        gets_a_chunk(&mut s, &d, id, "big", "ok"),
        "registered again, big gets chunks: {:?}",
        chunks(&s, id)
    );
}

/// Registers node `name` again (two cores, 1 GiB), as its agent does when told to.
fn join_agents_again(s: &mut State, name: &str) {
    use hetsched_proto as pb;
    use hetsched_server::convert::Wire;
    s.register(pb::RegisterRequest {
        name: name.into(),
        cores: 2,
        memory_bytes: 1 << 30,
        identity: crate::common::IDENTITY.into(),
        ..Default::default()
    })
    .expect("register");
}

/// A node whose agent an operator asked to stop (`hetsched node stop`) takes no new chunk, as
/// it takes no new batch task: one rule ([`NodeRec::takes_work`]) for both. Before, only a
/// drained or draining node was kept from new chunks, and the stopping agent got one.
#[test]
fn a_node_asked_to_stop_gets_no_new_chunk() {
    let d = crate::common::scratch("divisible-kind", "stop");
    let mut s = open(&d);
    join_agents(&mut s, &["a", "b"]);
    s.on_stop_node("a", true).expect("stop");
    let id = s.on_submit(rows()).expect("submitted").job_id;
    for _ in 0..3 {
        assert!(ask(&mut s, "a").expect("asked").is_empty(), "stopping");
    }
    assert_eq!(ask(&mut s, "b").expect("asked"), vec![(id, 0)]);
}

/// What a divisible job stores in the data directory — its input and its gathered output —
/// is private to the server's user (mode 0600, whatever its umask), as its store is, and so
/// are the directories holding them (0700); before, the files were created 0644 and the
/// directories 0755.
#[test]
fn a_divisible_jobs_stored_input_and_output_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let d = crate::common::scratch("divisible-kind", "private");
    let mut s = open(&d);
    join_agents(&mut s, &["a"]);
    let id = s.on_submit(with_input()).expect("submitted").job_id;
    let jd = d.join("divisible").join(format!("job-{id}"));
    for _ in 0..200 {
        for (_, chunk) in ask_short(&mut s, "a", false) {
            let tmp = jd.join(format!("chunk-{chunk}.part"));
            std::fs::write(&tmp, b"x\n").expect("output");
            assert!(
                s.on_chunk_done(&success(id, chunk), Some(&tmp))
                    .expect("recorded")
            );
        }
        if s.get_job(id).expect("job").state != "running" {
            break;
        }
    }
    assert_eq!(s.get_job(id).expect("job").state, "completed");
    for name in ["input", "output"] {
        let mode = std::fs::metadata(jd.join(name))
            .expect(name)
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name}: {mode:o}");
    }
    for dir in [jd.parent().expect("divisible"), &jd] {
        let mode = std::fs::metadata(dir).expect("dir").permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}: {mode:o}", dir.display());
    }
}

/// A chunk says why it ended without success in a task's words, in `hetsched job N` and its
/// JSON, and after a restart: a failed chunk what its agent said (`time_limit`), one lost with
/// its agent's process `lost` (its units went out again), one stopped by its job's cancel
/// `cancelled`; a done chunk has none (`null`). Before, only the prose `message` of the job
/// said anything, and nothing of a chunk.
#[test]
fn a_chunks_reason_says_why_it_failed_was_lost_or_was_stopped_in_a_tasks_words() {
    use hetsched_server::convert::Wire;
    use hetsched_server::store::EndReason;
    let d = crate::common::scratch("divisible-kind", "chunk-reasons");
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a"]);
        let id = s
            .on_submit(Submission {
                text: format!("{JOB}retries = 3\n"),
                ..rows()
            })
            .expect("submitted")
            .job_id;
        assert_eq!(ask(&mut s, "a").expect("asked"), vec![(id, 0)]);
        let timed_out = ChunkResult {
            success: false,
            message: "time limit of 0.010s exceeded".into(),
            reason: Some(EndReason::TimeLimit),
            ..success(id, 0)
        };
        assert!(s.on_chunk_done(&timed_out, None).expect("recorded"));
        let next = ask(&mut s, "a").expect("asked");
        assert!(chunk_done(&mut s, &d, id, next[0].1));
        assert!(!ask(&mut s, "a").expect("asked").is_empty(), "a chunk out");
        // The agent comes back as another process holding nothing: what it held is lost.
        assert!(!ask_holding(&mut s, "a", "i2", &[]).is_empty());
        s.on_cancel(id).expect("cancelled");
        id
    };
    for round in ["before a restart", "after it"] {
        let s = open(&d);
        let job = s.job(id).expect("job");
        let json = hetsched_server::json::job(&job);
        let shown: Vec<(String, serde_json::Value)> = json["divisible"]["chunks"]
            .as_array()
            .expect("chunks")
            .iter()
            .map(|c| {
                (
                    c["state"].as_str().unwrap_or_default().to_string(),
                    c["reason"].clone(),
                )
            })
            .collect();
        let mut states: Vec<&str> = shown.iter().map(|(st, _)| st.as_str()).collect();
        states.sort_unstable();
        states.dedup();
        assert_eq!(
            states,
            ["done", "failed", "lost", "stopped"],
            "{round}: {shown:?}"
        );
        for (state, reason) in &shown {
            let want = match state.as_str() {
                "failed" => serde_json::json!("time_limit"),
                "lost" => serde_json::json!("lost"),
                "stopped" => serde_json::json!("cancelled"),
                _ => serde_json::Value::Null,
            };
            assert_eq!(reason, &want, "{round}: a {state} chunk");
        }
        drop(s);
    }
}

/// The units of job `id`'s chunks handed to `name`, by its asks' orders.
fn units_of(s: &State, id: u64, name: &str) -> u64 {
    s.get_job(id)
        .expect("job")
        .divisible
        .expect("a divisible view")
        .chunks
        .iter()
        .filter(|c| c.worker == name && c.state != "done")
        .map(|c| c.end - c.start)
        .sum()
}

/// A restart between two rounds (every worker holding nothing at that moment) keeps the plan's
/// workers: the first agent to ask after it gets its share, not the whole rest of the load, and
/// the second gets its own. Before, the workers that held no chunk at the restart were taken
/// for gone at once: the first ask after it was planned everything (UMRLM had planned one
/// round), and the other agent sat idle, which doubled the makespan.
#[test]
fn a_restart_between_rounds_keeps_every_worker_of_the_plan() {
    let d = crate::common::scratch("divisible-kind", "restart-between-rounds");
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a", "b"]);
        let id = s.on_submit(rows()).expect("submitted").job_id;
        // The first round: each computes what it gets.
        for name in ["a", "b"] {
            for (job, chunk) in ask(&mut s, name).expect("asks") {
                assert!(chunk_done(&mut s, &d, job, chunk));
            }
        }
        id
    };
    let mut s = open(&d);
    let a = ask(&mut s, "a").expect("a asks");
    let b = ask(&mut s, "b").expect("b asks");
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both get work: a {a:?}, b {b:?}"
    );
    let (ua, ub) = (units_of(&s, id, "a"), units_of(&s, id, "b"));
    assert!(
        ub * 3 >= ua,
        "b's share is not left to a: a {ua} units, b {ub} units out"
    );
}

/// Job `id`'s chunk rows and worker rows in the store.
fn stored_chunks(d: &Path, id: u64) -> (i64, i64) {
    let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
    let count = |table: &str| -> i64 {
        conn.query_row(
            &format!("SELECT COUNT(*) FROM {table} WHERE job = ?1"),
            [id as i64],
            |r| r.get(0),
        )
        .expect("count")
    };
    (count("div_chunks"), count("div_workers"))
}

/// A purged divisible job's chunk rows go as a batch job's task rows do: the purge's
/// transaction marks the job purged (its few worker rows go with it) and deletes at most the
/// chunk bound of its chunk rows (here 1); the rest go in steps of that many, one transaction
/// each; a restart in the middle reads none of them and finishes the work. Before, one
/// transaction deleted every chunk row while the state was held.
#[test]
fn a_purged_divisible_jobs_chunk_rows_are_deleted_in_bounded_steps() {
    use hetsched_server::convert::Wire;
    let d = Scratch::new("divisible-kind", "purge-steps");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        purge_chunk_tasks: 1,
        ..Default::default()
    };
    let open_bounded =
        || State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let mut s = open_bounded();
    join_agents(&mut s, &["a", "b", "c"]);
    let id = s.on_submit(rows()).expect("submit").job_id;
    for a in ["a", "b", "c"] {
        assert!(
            !ask(&mut s, a).expect("asked").is_empty(),
            "{a} got a chunk"
        );
    }
    let (chunks, workers) = stored_chunks(&d, id);
    assert!(
        chunks >= 3 && workers > 0,
        "{chunks} chunks, {workers} workers"
    );
    let out: Vec<u64> = self::chunks(&s, id)
        .into_iter()
        .filter(|(_, state)| state == "out")
        .map(|(k, _)| k)
        .collect();
    s.on_cancel(id).expect("cancelled");
    // (A job is purged once none of its chunks stops: here each one's result came.)
    for k in out {
        s.on_chunk_done(&success(id, k), None).expect("reported");
    }
    let reply = s
        .purge(&hetsched_proto::PurgeRequest {
            job_ids: vec![id],
            ..Default::default()
        })
        .expect("purge");
    assert_eq!((reply.purged, reply.tasks), (vec![id], 100));
    assert_eq!(stored_chunks(&d, id), (chunks - 1, 0));
    assert_eq!(s.purge_left(), chunks as u64 - 1);
    assert!(s.job(id).is_err());
    assert_eq!(s.purge_step().expect("a step"), 1);
    // The server stops with rows to delete; the restart does not read them.
    drop(s);
    let mut s = open_bounded();
    assert_eq!(s.purge_left(), chunks as u64 - 2);
    assert!(s.job(id).is_err());
    assert!(s.jobs().jobs.is_empty());
    let mut steps = 0;
    while s.purge_step().expect("a step") > 0 {
        steps += 1;
    }
    assert_eq!(steps, chunks - 2);
    assert_eq!(stored_chunks(&d, id), (0, 0));
}

/// Whether job `id` stops (its `stopping`) and whether it is over for a wait.
fn stopping(s: &State, id: u64) -> (u32, bool) {
    (
        s.get_job(id).expect("job").stopping,
        s.job_over(id).expect("job"),
    )
}

/// A cancel is recorded at once, but the chunks out when it came run on until their agents
/// have stopped their processes (SIGTERM, the kill grace): the job reads `cancelled` with
/// `stopping` 2, a wait on it (`job_over`) and a batch job `--after-any` it wait, and each
/// chunk stops stopping when its agent's ask no longer lists it — not an ask within the grace
/// of its send, whose reply may still be on its way — or when its result comes (it ended before
/// its agent heard of the cancel). The last one wakes the waiters. Before, its wait returned at
/// the cancel while the chunks' processes still ran.
#[test]
fn a_cancelled_divisible_job_is_over_once_its_agents_no_longer_list_its_chunks() {
    let d = crate::common::scratch("divisible-kind", "stopping");
    let mut s = open(&d);
    join_agents(&mut s, &["a", "b"]);
    let id = s.on_submit(rows()).expect("submitted").job_id;
    let after = s
        .on_submit(Submission {
            after_any: vec![id],
            ..sweep(1)
        })
        .expect("submitted after")
        .job_id;
    assert_eq!(ask_holding(&mut s, "a", "a-1", &[]), vec![(id, 0)]);
    assert_eq!(ask_holding(&mut s, "b", "b-1", &[]), vec![(id, 1)]);
    let sent = std::time::Instant::now();
    let mut ends = s.job_ends();
    s.on_cancel(id).expect("cancel");
    let j = s.get_job(id).expect("job");
    assert_eq!((j.state.as_str(), j.stopping), ("cancelled", 2));
    assert!(s.job_ended(id).expect("job"), "cancelled at once");
    assert!(!s.job_over(id).expect("job"), "its chunks' processes run");
    assert!(
        s.get_job(after).expect("job").waiting,
        "the job after it waits too"
    );
    ends.mark_unchanged();
    // a still lists its chunk (its SIGTERM handler runs): told to drop it, it stops on.
    let r = s
        .on_next_chunk(ChunkRequest {
            name: "a".into(),
            memory_bytes: 1 << 30,
            incarnation: "a-1".into(),
            holding: vec![hetsched_server::jobs::divisible::ChunkKey {
                job_id: id,
                chunk: 0,
            }],
            room: true,
            ..Default::default()
        })
        .expect("asked");
    assert_eq!(r.drop.len(), 1);
    assert_eq!(stopping(&s, id), (2, false));
    // An ask that does not list it within its grace may have crossed the reply carrying it.
    ask_holding(&mut s, "a", "a-1", &[]);
    assert_eq!(stopping(&s, id), (2, false), "within the grace of its send");
    // b's chunk ended before its agent heard: its result says its process ended.
    assert!(
        !chunk_done(&mut s, &d, id, 1),
        "a stopped chunk's result is not recorded"
    );
    assert_eq!(stopping(&s, id), (1, false));
    assert!(!ends.has_changed().expect("open"), "one chunk still stops");
    // Past the grace, a's ask without its chunk says its process ended: the job is over.
    std::thread::sleep(hetsched_server::jobs::divisible::GRACE.saturating_sub(sent.elapsed()));
    ask_holding(&mut s, "a", "a-1", &[]);
    assert_eq!(stopping(&s, id), (0, true));
    assert!(
        ends.has_changed().expect("open"),
        "the last one wakes its waiters"
    );
    assert!(
        !s.get_job(after).expect("job").waiting,
        "the job after it is released"
    );
    assert_eq!(
        chunks(&s, id),
        vec![(0, "stopped".to_string()), (1, "stopped".to_string())]
    );
}

/// A stopping chunk whose agent's node is declared dead is waited for no more; the others stay
/// stopping across a restart (stored), where purging the job is refused, until their agent's
/// first ask says otherwise — a chunk rebuilt at a restart has no grace.
#[test]
fn a_stopping_chunk_ends_with_its_agents_node_and_stays_so_across_a_restart() {
    let d = crate::common::scratch("divisible-kind", "stopping-restart");
    let id = {
        let mut s = open(&d);
        join_agents(&mut s, &["a", "b"]);
        let id = s.on_submit(rows()).expect("submitted").job_id;
        assert_eq!(ask_holding(&mut s, "a", "a-1", &[]), vec![(id, 0)]);
        assert_eq!(ask_holding(&mut s, "b", "b-1", &[]), vec![(id, 1)]);
        s.on_cancel(id).expect("cancel");
        assert_eq!(stopping(&s, id), (2, false));
        let mut ends = s.job_ends();
        ends.mark_unchanged();
        // b falls silent and its node is declared dead: nothing will say more of its chunk.
        std::thread::sleep(crate::common::SILENCE);
        crate::common::beat(&mut s, 0, &[], &[]);
        ask_holding(&mut s, "a", "a-1", &[(id, 0)]);
        s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
        assert!(
            s.list_nodes().iter().any(|n| n.name == "b" && !n.alive),
            "b is dead"
        );
        assert_eq!(stopping(&s, id), (1, false));
        assert!(!ends.has_changed().expect("open"), "a's chunk still stops");
        id
    }; // the server dies here
    let mut s = open(&d);
    assert_eq!(stopping(&s, id), (1, false), "stored");
    let e = s
        .on_purge(&hetsched_server::state::types::PurgeSelection {
            job_ids: vec![id],
            ..Default::default()
        })
        .expect_err("still stopping");
    assert!(
        e.to_string()
            .contains("is still stopping: the processes of 1 chunk may still run"),
        "{e}"
    );
    // a reconnects and still lists it (its handler runs), then no longer does.
    ask_holding(&mut s, "a", "a-1", &[(id, 0)]);
    assert_eq!(stopping(&s, id), (1, false));
    ask_holding(&mut s, "a", "a-1", &[]);
    assert_eq!(stopping(&s, id), (0, true));
    s.on_purge(&hetsched_server::state::types::PurgeSelection {
        job_ids: vec![id],
        ..Default::default()
    })
    .expect("purged once it stops no more");
    // Nothing is left to wait for after another restart.
    drop(s);
    let s = open(&d);
    let stored: i64 = rusqlite::Connection::open(d.join("state.db"))
        .expect("db")
        .query_row("SELECT COUNT(*) FROM task_stops", [], |r| r.get(0))
        .expect("count");
    assert_eq!(stored, 0);
    assert!(s.get_job(id).is_err(), "purged");
}

/// A purge drops a divisible job's file from the store, as a batch job's (its row keeps a
/// digest): a submission repeating its key is still the purged job, with the units of the file
/// it sent, and one with another file is refused, before and after a restart.
#[test]
fn a_purged_divisible_job_keeps_no_file_but_its_key_still_names_it() {
    use hetsched_server::convert::Wire;
    let d = Scratch::new("divisible-kind", "purge-text");
    let keyed = |text: &str| Submission {
        text: text.into(),
        key: "k".into(),
        ..rows()
    };
    let big = format!("{JOB}# {}\n", "x".repeat(100_000));
    let stored_len = || -> i64 {
        let conn = rusqlite::Connection::open(d.join("state.db")).expect("db");
        conn.query_row("SELECT length(text) FROM div_jobs WHERE id = 1", [], |r| {
            r.get(0)
        })
        .expect("row")
    };
    let mut s = open(&d);
    let id = s.on_submit(keyed(&big)).expect("submit").job_id;
    assert_eq!(id, 1);
    assert!(stored_len() > 100_000);
    s.on_cancel(id).expect("cancelled");
    s.purge(&hetsched_proto::PurgeRequest {
        job_ids: vec![id],
        ..Default::default()
    })
    .expect("purge");
    assert!(stored_len() < 100, "{} bytes kept", stored_len());
    for restarted in [false, true] {
        if restarted {
            drop(s);
            s = open(&d);
        }
        let again = s.on_submit(keyed(&big)).expect("the same file");
        assert_eq!(
            (again.job_id, again.existing, again.tasks),
            (1, true, 100),
            "restarted: {restarted}"
        );
        let e = s.on_submit(keyed(JOB)).expect_err("another file");
        assert!(e.to_string().contains("submitted with another file"), "{e}");
    }
}
