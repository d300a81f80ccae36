//! Accelerator sharing in the server without a network (spec 01, issue 11): the binding kept by the
//! core's rules as nodes are heard from and die, told to each agent in its heartbeat replies, and
//! what it means for placement and for offloaded tasks when an ANode is lost.

use crate::common;

use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::config::BindingKind;
use hetsched_server::convert::Wire;
use hetsched_server::state::State;
use hetsched_server::store::Store;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::common::Scratch;

fn open(name: &str, binding: BindingKind) -> (State, Scratch) {
    open_with(
        name,
        ServerConfig {
            binding,
            ..Default::default()
        },
    )
}

/// [`open`] with `config` (its data directory set here).
fn open_with(name: &str, config: ServerConfig) -> (State, Scratch) {
    let d = Scratch::new("accel", name);
    let config = ServerConfig {
        data_dir: d.clone(),
        ..config
    };
    let s = State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    (s, d)
}

/// Registers a node; `gpus` devices of `speed` make it an ANode (its service on port 7000 + id).
fn node(s: &mut State, name: &str, gpus: u32, speed: f64) -> u32 {
    let id = s
        .register(pb::RegisterRequest {
            identity: common::IDENTITY.into(),
            name: name.into(),
            cores: 4,
            memory_bytes: 1 << 30,
            accelerators: (0..gpus)
                .map(|_| pb::Accelerator {
                    kind: "sim".into(),
                    memory_bytes: 1 << 30,
                    speed,
                })
                .collect(),
            ..Default::default()
        })
        .expect("register")
        .node_id;
    s.note_peer(id, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    id
}

/// A heartbeat of `id` in `rack` (an ANode announces its service), reporting `running`.
fn beat(
    s: &mut State,
    id: u32,
    rack: &str,
    anode: bool,
    running: &[(u64, u32)],
) -> pb::HeartbeatReply {
    let mut req = common::heartbeat_request(id, running, &[]);
    req.rack = rack.into();
    if anode {
        req.accel_port = 7000 + id;
        req.accel = Some(pb::AccelState::default());
    }
    s.heartbeat(req).expect("heartbeat")
}

fn bound_to(r: &pb::HeartbeatReply) -> (String, String) {
    let b = r.binding.clone().expect("every reply carries the binding");
    (b.anode, b.address)
}

const GPU_JOB: &str = "[[application]]\nname = \"solve\"\ntasks = 6\naccelerator = \"required\"\n\
     inputs = [\"in/{index}\"]\noutputs = [\"out/{index}\"]\n[application.gpu]\ncommand = \"solve\"\n";

#[test]
fn nnodes_of_a_rack_with_an_anode_are_bound_to_it_and_get_gpu_work_the_other_rack_gets_none() {
    let (mut s, _d) = open("plain", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    let nb = node(&mut s, "nb", 0, 1.0);
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[]);
    beat(&mut s, nb, "B", false, &[]);
    // The next replies carry the map.
    assert_eq!(
        bound_to(&beat(&mut s, n1, "A", false, &[])),
        ("anode".into(), format!("http://127.0.0.1:{}", 7000 + a))
    );
    assert_eq!(
        bound_to(&beat(&mut s, nb, "B", false, &[])),
        (String::new(), String::new())
    );
    assert_eq!(bound_to(&beat(&mut s, a, "A", true, &[])).0, "");

    s.submit_named("job.toml", GPU_JOB, "/tmp", "", "")
        .expect("submit");
    // The rack-B NNode reaches no device: no GPU task for it.
    assert!(beat(&mut s, nb, "B", false, &[]).assignments.is_empty());
    let r = beat(&mut s, n1, "A", false, &[]);
    assert_eq!(r.assignments.len(), 1, "the bound NNode takes GPU work");
    let t = &r.assignments[0];
    let spec = r.specs.iter().find(|x| x.key == t.spec).expect("spec sent");
    assert_eq!(
        (spec.variant.as_str(), spec.accelerator.as_str()),
        ("gpu", "required")
    );
    assert_eq!(
        (spec.inputs.clone(), spec.outputs.clone()),
        (
            vec!["in/{index}".to_string()],
            vec!["out/{index}".to_string()]
        )
    );
    let tasks = s.tasks(1).expect("tasks").tasks;
    let listed = tasks.iter().find(|x| x.id == t.task_id).expect("task");
    assert_eq!(
        (listed.node.as_str(), listed.executed_node.as_str()),
        ("n1", "anode")
    );

    // The ANode stops heartbeating: it is declared dead, n1 waits unbound, and the task it had
    // offloaded goes back to the queue; n1 is told to kill the old attempt.
    std::thread::sleep(crate::common::SILENCE);
    beat(&mut s, n1, "A", false, &[(t.task_id, t.attempt)]);
    beat(&mut s, nb, "B", false, &[]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let listed = s.tasks(1).expect("tasks").tasks;
    let again = listed.iter().find(|x| x.id == t.task_id).expect("task");
    assert_eq!(again.state, "pending", "{again:?}");
    let r = beat(&mut s, n1, "A", false, &[(t.task_id, t.attempt)]);
    assert_eq!(bound_to(&r).0, "", "unbound once its ANode is gone");
    assert!(
        r.kill
            .iter()
            .any(|k| k.task_id == t.task_id && k.attempt == t.attempt)
    );
    assert!(r.assignments.is_empty(), "no GPU work without an ANode");
    let nodes = s.nodes(true).nodes;
    let n1_info = nodes.iter().find(|n| n.name == "n1").expect("n1");
    assert_eq!(
        (
            n1_info.role.as_str(),
            n1_info.bound_to.as_str(),
            n1_info.rack.as_str()
        ),
        ("nnode", "", "A")
    );

    // The ANode comes back: n1 is bound again, and the re-queued task runs again with the next
    // attempt (on the ANode or offloaded by n1), the old attempt's result being void.
    let mut again: Vec<(u64, u32)> = beat(&mut s, a, "A", true, &[])
        .assignments
        .iter()
        .map(|x| (x.task_id, x.attempt))
        .collect();
    let r = beat(&mut s, n1, "A", false, &[]);
    assert_eq!(bound_to(&r).0, "anode");
    again.extend(r.assignments.iter().map(|x| (x.task_id, x.attempt)));
    assert!(
        again.contains(&(t.task_id, t.attempt + 1)),
        "{again:?} lacks the re-queued task"
    );
}

#[test]
fn weighted_binding_gives_the_faster_anode_more_nnodes() {
    // Spec 01's weighted example: fast (weight 2) and slow (weight 1), four NNodes → 3 : 1.
    let (mut s, _d) = open("weighted", BindingKind::Weighted);
    let fast = node(&mut s, "fast", 1, 2.0);
    let slow = node(&mut s, "slow", 1, 1.0);
    beat(&mut s, fast, "r", true, &[]);
    beat(&mut s, slow, "r", true, &[]);
    let ns: Vec<u32> = (1..=4)
        .map(|i| node(&mut s, &format!("n{i}"), 0, 1.0))
        .collect();
    for &n in &ns {
        beat(&mut s, n, "r", false, &[]);
    }
    let map: Vec<String> = ns
        .iter()
        .map(|&n| bound_to(&beat(&mut s, n, "r", false, &[])).0)
        .collect();
    assert_eq!(map, ["fast", "fast", "fast", "slow"]);
}

/// A job of one application with both variants and `accelerator = need` (absent for "").
fn mixed_job(need: &str) -> String {
    let field = if need.is_empty() {
        String::new()
    } else {
        format!("accelerator = \"{need}\"\n")
    };
    format!(
        "[[application]]\nname = \"solve\"\ntasks = 12\n{field}\
         [application.cpu]\ncommand = \"solve --cpu\"\n[application.gpu]\ncommand = \"solve\"\n"
    )
}

/// Rack A: an ANode (1 GPU) and an NNode bound to it; rack B: an NNode alone (a CPU node).
fn racks(s: &mut State) -> (u32, u32, u32) {
    let a = node(s, "anode", 1, 1.0);
    let n1 = node(s, "n1", 0, 1.0);
    let nb = node(s, "nb", 0, 1.0);
    beat(s, a, "A", true, &[]);
    beat(s, n1, "A", false, &[]);
    beat(s, nb, "B", false, &[]);
    (a, n1, nb)
}

/// The variants of the tasks a reply assigns.
fn variants(r: &pb::HeartbeatReply) -> Vec<String> {
    r.assignments
        .iter()
        .map(|a| {
            let spec = r.specs.iter().find(|x| x.key == a.spec);
            spec.map_or("known".into(), |x| x.variant.clone())
        })
        .collect()
}

#[test]
fn a_required_task_is_placed_only_where_a_device_is_reachable() {
    let (mut s, _d) = open("required", BindingKind::Plain);
    let (a, n1, nb) = racks(&mut s);
    s.submit_named("job.toml", &mixed_job("required"), "/tmp", "", "")
        .expect("submit");
    // The CPU node never takes it, though it has a CPU variant and idle cores.
    assert!(beat(&mut s, nb, "B", false, &[]).assignments.is_empty());
    assert_eq!(variants(&beat(&mut s, a, "A", true, &[])), ["gpu"]);
    assert_eq!(variants(&beat(&mut s, n1, "A", false, &[])), ["gpu"]);
    assert!(beat(&mut s, nb, "B", false, &[]).assignments.is_empty());
}

#[test]
fn a_preferred_task_takes_reachable_devices_first_and_a_cpu_node_only_when_they_are_busy() {
    let (mut s, _d) = open("preferred", BindingKind::Plain);
    let (a, n1, nb) = racks(&mut s);
    s.submit_named("job.toml", &mixed_job("preferred"), "/tmp", "", "")
        .expect("submit");
    // A device is free (the ANode's, reached by n1 too): the CPU node waits for it.
    assert!(beat(&mut s, nb, "B", false, &[]).assignments.is_empty());
    // Nodes that reach a device run it there, never on their cores.
    let on_anode = beat(&mut s, a, "A", true, &[]);
    assert_eq!(variants(&on_anode), ["gpu"]);
    let on_n1 = beat(&mut s, n1, "A", false, &[]);
    assert_eq!(variants(&on_n1), ["gpu"]);
    // Every reachable device is taken: the CPU node runs the rest on its cores.
    assert_eq!(variants(&beat(&mut s, nb, "B", false, &[])), ["cpu"; 4]);
}

#[test]
fn a_task_without_the_field_is_placed_as_before() {
    let (mut s, _d) = open("no-need", BindingKind::Plain);
    let (_a, _n1, nb) = racks(&mut s);
    s.submit_named("job.toml", &mixed_job(""), "/tmp", "", "")
        .expect("submit");
    // The policy chooses freely: the CPU node's cores take tasks while devices are free.
    assert_eq!(variants(&beat(&mut s, nb, "B", false, &[])), ["cpu"; 4]);
}

#[test]
fn a_required_job_is_refused_where_no_node_reaches_a_device() {
    let (mut s, _d) = open("required-refused", BindingKind::Plain);
    let nb = node(&mut s, "nb", 0, 1.0);
    beat(&mut s, nb, "B", false, &[]);
    let e = s
        .submit_named("job.toml", &mixed_job("required"), "/tmp", "", "")
        .expect_err("no device anywhere");
    assert!(e.to_string().contains("runs only on GPUs"), "{e}");
    // Its CPU variant makes a preferred one runnable.
    s.submit_named("job.toml", &mixed_job("preferred"), "/tmp", "", "")
        .expect("preferred runs on the CPU");
}

/// A heartbeat of ANode `id` reporting its service's queues.
fn anode_reports(s: &mut State, id: u32, reading: u32, queued: u32, capacity: u32) {
    let mut req = common::heartbeat_request(id, &[], &[]);
    req.rack = "A".into();
    req.accel_port = 7000 + id;
    req.accel = Some(pb::AccelState {
        devices: vec![pb::DeviceState::default()],
        reading,
        process_queue: queued,
        process_capacity: capacity,
        ..Default::default()
    });
    s.heartbeat(req).expect("heartbeat");
}

#[test]
fn the_nnodes_of_an_anode_whose_queue_is_full_get_no_offloads_until_it_has_room() {
    let (mut s, _d) = open("queue-full", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    let n2 = node(&mut s, "n2", 0, 1.0);
    anode_reports(&mut s, a, 0, 0, 16);
    beat(&mut s, n1, "A", false, &[]);
    beat(&mut s, n2, "A", false, &[]);
    s.submit_named("job.toml", GPU_JOB, "/tmp", "", "")
        .expect("submit");
    // The ANode's process queue is full (16 of 16): its NNodes get no accelerator work.
    anode_reports(&mut s, a, 0, 16, 16);
    assert!(beat(&mut s, n1, "A", false, &[]).assignments.is_empty());
    let listed = s.nodes(true).nodes;
    let anode = listed.iter().find(|n| n.name == "anode").expect("anode");
    let q = anode.accel.clone().expect("queues listed");
    assert_eq!((q.process_queue, q.process_capacity), (16, 16));
    // Room again: the next beat of an NNode offloads.
    anode_reports(&mut s, a, 0, 3, 16);
    let given = beat(&mut s, n1, "A", false, &[]).assignments;
    assert_eq!(given.len(), 1);
    let on_n1 = [(given[0].task_id, given[0].attempt)];

    // What was sent since the ANode's last report counts: one slot left (14 received or
    // waiting + 1 queued of 16); n2 takes it, so n1, once its device is free again, waits for
    // the ANode's next report.
    anode_reports(&mut s, a, 14, 1, 16);
    assert_eq!(
        beat(&mut s, n2, "A", false, &[]).assignments.len(),
        1,
        "the last slot"
    );
    let mut req = common::heartbeat_request(n1, &[], &[(on_n1[0].0, on_n1[0].1, true)]);
    req.rack = "A".into();
    let r = s.heartbeat(req).expect("heartbeat");
    assert!(r.assignments.is_empty(), "{:?}", r.assignments);
    anode_reports(&mut s, a, 0, 0, 16);
    assert_eq!(beat(&mut s, n1, "A", false, &[]).assignments.len(), 1);
}

/// An ANode that crashed is alive for the server until its dead timeout. An offload its NNode
/// could not make (reported `interrupted`) closes the ANode to its NNodes until it is heard from
/// again, so the task loses one attempt, not every attempt within the timeout (a hands-on
/// review: three tries of about 3 s each fit in the 10 s dead timeout, and the job failed).
#[test]
fn an_interrupted_offload_closes_its_anode_to_its_nnodes_until_it_beats_again() {
    let (mut s, _d) = open("unreachable", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    anode_reports(&mut s, a, 0, 0, 16);
    beat(&mut s, n1, "A", false, &[]);
    let two = GPU_JOB.replace("tasks = 6", "tasks = 2");
    s.submit_named("job.toml", &two, "/tmp", "", "")
        .expect("submit");
    let given = beat(&mut s, n1, "A", false, &[]).assignments;
    assert_eq!(given.len(), 1, "n1 reaches one device");
    let (task, attempt) = (given[0].task_id, given[0].attempt);
    // The ANode crashes; the NNode's offload fails and is reported interrupted.
    let mut req = common::heartbeat_request(n1, &[], &[]);
    req.rack = "A".into();
    req.results.push(pb::TaskResult {
        task_id: task,
        attempt,
        exit_code: -1,
        interrupted: true,
        message: "offload to anode failed 5 times: connection refused".into(),
        ..Default::default()
    });
    let r = s.heartbeat(req).expect("heartbeat");
    assert!(
        r.assignments.is_empty(),
        "the same beat sends it no accelerator work: {:?}",
        r.assignments
    );
    for _ in 0..3 {
        assert!(
            beat(&mut s, n1, "A", false, &[]).assignments.is_empty(),
            "nor its next beats while the ANode is silent"
        );
    }
    let tasks = s.tasks(1).expect("tasks").tasks;
    let t = tasks.iter().find(|t| t.id == task).expect("task");
    assert_eq!((t.state.as_str(), t.attempt), ("pending", 1), "{t:?}");
    // The ANode is heard from again (and takes one task on its own device): its NNode offloads
    // again, and the lost task had lost one attempt only.
    anode_reports(&mut s, a, 0, 0, 16);
    assert_eq!(beat(&mut s, n1, "A", false, &[]).assignments.len(), 1);
    let tasks = s.tasks(1).expect("tasks").tasks;
    assert!(tasks.iter().all(|t| t.state == "running"), "{tasks:?}");
    let t = tasks.iter().find(|t| t.id == task).expect("task");
    assert_eq!(t.attempt, 2, "{t:?}");
}

/// A submission is checked against the nodes as the policy sees them: a bound NNode reaches
/// its ANode's devices, so a GPU job aimed at it (`--requires node:n1`) is accepted and runs
/// there; one aimed at an NNode bound to no ANode is still refused, saying why (a hands-on
/// review: both were refused).
#[test]
fn a_gpu_job_aimed_at_a_bound_nnode_is_accepted_and_one_at_an_unbound_nnode_refused() {
    let (mut s, _d) = open("aimed", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    let nb = node(&mut s, "nb", 0, 1.0);
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[]);
    beat(&mut s, nb, "B", false, &[]);
    let aimed = |node: &str| {
        GPU_JOB.replace("tasks = 6", "tasks = 1").replace(
            "[application.gpu]",
            &format!("requires = [\"node:{node}\"]\n[application.gpu]"),
        )
    };
    s.submit_named("job.toml", &aimed("n1"), "/tmp", "", "")
        .expect("a bound NNode reaches a GPU");
    let r = beat(&mut s, n1, "A", false, &[]);
    assert_eq!(r.assignments.len(), 1, "and runs the task");
    let e = s
        .submit_named("job.toml", &aimed("nb"), "/tmp", "", "")
        .expect_err("an unbound NNode reaches none");
    assert!(e.to_string().contains("runs only on GPUs"), "{e}");
}

/// The accounts count a shared device once: an ANode with one GPU and its two bound NNodes run
/// three GPU tasks at once (the view sees the device on each node), but the capacity offers one
/// GPU and the owner is charged at most one GPU-second per second (found by a hands-on review:
/// three times the GPU-hours that ran).
#[test]
fn the_accounts_count_a_shared_device_once() {
    let (mut s, _d) = open("accounts", BindingKind::Plain);
    // The device is offered from the ANode's registration on: the beats, the submission and the
    // dispatch before `started` count too, and on a loaded machine their commits take more than
    // the 0.1 s the bound below used to allow for them.
    let registered = std::time::Instant::now();
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    let n2 = node(&mut s, "n2", 0, 1.0);
    for _ in 0..2 {
        beat(&mut s, a, "A", true, &[]);
        beat(&mut s, n1, "A", false, &[]);
        beat(&mut s, n2, "A", false, &[]);
    }
    s.submit_named("job.toml", GPU_JOB, "/tmp", "", "")
        .expect("submit");
    let mut running = Vec::new();
    for (id, anode) in [(a, true), (n1, false), (n2, false)] {
        let r = beat(&mut s, id, "A", anode, &[]);
        assert_eq!(r.assignments.len(), 1, "one GPU task on each node");
        running.push((
            id,
            anode,
            r.assignments[0].task_id,
            r.assignments[0].attempt,
        ));
    }
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(600));
    for &(id, anode, task, attempt) in &running {
        beat(&mut s, id, "A", anode, &[(task, attempt)]);
    }
    let ran_s = started.elapsed().as_secs_f64();
    let today = hetsched_server::accounting::day_of(hetsched_server::state::now_ns());
    let rows = s.usage_report(today, today, None).expect("report");
    // After the report: the capacity is offered up to the report's own instant (on a loaded
    // machine a few ms after the beats).
    let offered_s = registered.elapsed().as_secs_f64();
    let gpu_of = |owner: &str| {
        rows.iter()
            .filter(|r| r.owner == owner)
            .map(|r| r.held.gpu_seconds)
            .sum::<f64>()
    };
    let (offered, charged) = (
        gpu_of(hetsched_server::accounting::CAPACITY),
        gpu_of(hetsched_server::users::ADMIN),
    );
    assert!(
        offered > 0.5 && offered <= offered_s,
        "one device offered for ~0.6 s ({ran_s:.3} s running, {offered_s:.3} s since the ANode \
         registered): {offered} ({rows:?})"
    );
    assert!(
        charged > 0.4 && charged <= offered + 1e-9,
        "three tasks share the one device: {charged} of {offered}"
    );
}

/// The state a restarted server opens on `dir`.
fn reopen(dir: &std::path::Path, binding: BindingKind) -> State {
    let config = ServerConfig {
        data_dir: dir.to_path_buf(),
        binding,
        ..Default::default()
    };
    State::open(&config, Store::open(&dir.join("state.db")).expect("store")).expect("state")
}

/// A GPU job of `tasks` tasks that run only on NNode `n1` (the ANode takes none itself).
fn on_n1(tasks: u32) -> String {
    GPU_JOB
        .replace("tasks = 6", &format!("tasks = {tasks}"))
        .replace(
            "[application.gpu]",
            "requires = [\"node:n1\"]\n[application.gpu]",
        )
}

/// A heartbeat of NNode `id` in rack A reporting `running` and `results`.
fn nnode_reports(
    s: &mut State,
    id: u32,
    running: &[(u64, u32)],
    results: Vec<pb::TaskResult>,
) -> Result<pb::HeartbeatReply, hetsched_server::state::StateError> {
    let mut req = common::heartbeat_request(id, running, &[]);
    req.rack = "A".into();
    req.results = results;
    s.heartbeat(req)
}

/// A fresh state with ANode `anode` (`gpus` devices) and NNode `n1`, both in rack A and heard
/// from (so n1 is bound to the ANode), and [`on_n1`]`(tasks)` submitted: the state, its
/// directory and n1's id.
fn anode_and_n1(name: &str, gpus: u32, tasks: u32) -> (State, Scratch, u32) {
    let (mut s, d) = open(name, BindingKind::Plain);
    let a = node(&mut s, "anode", gpus, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[]);
    s.submit_named("job.toml", &on_n1(tasks), "/tmp", "", "")
        .expect("submit");
    (s, d, n1)
}

/// Attempt `attempt` of `task` succeeded, as an agent that says nothing of an ANode reports it.
fn succeeded(task: u64, attempt: u32) -> pb::TaskResult {
    pb::TaskResult {
        task_id: task,
        attempt,
        success: true,
        started_ns: 1,
        finished_ns: 2,
        ..Default::default()
    }
}

/// Job 1's tasks as listed: (id, state, node, executed node).
fn ran_on(s: &State) -> Vec<(u64, String, String, String)> {
    s.tasks(1)
        .expect("tasks")
        .tasks
        .into_iter()
        .map(|t| (t.id, t.state, t.node, t.executed_node))
        .collect()
}

/// The ANode an offloaded task ran on is stored with its dispatch ("nothing accepted is
/// lost"): listings name it after a rollback (a full disk) and after a restart, and an offload
/// still running at a restart is re-queued when its ANode is lost, as before the restart. It
/// was memory only: a restart or a rollback listed such tasks as run on their NNodes, and
/// kept one running through its ANode's loss.
#[test]
fn the_anode_an_offloaded_task_ran_on_is_stored_through_a_rollback_and_a_restart() {
    let (mut s, d) = open("stored", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    let key = beat(&mut s, a, "A", true, &[]).offload_key;
    beat(&mut s, n1, "A", false, &[]);
    s.submit_named("job.toml", &on_n1(3), "/tmp", "", "")
        .expect("submit");
    let given = beat(&mut s, n1, "A", false, &[]).assignments;
    assert_eq!(given.len(), 1, "n1 reaches one device");
    let t1 = (given[0].task_id, given[0].attempt);
    // It ends; the same reply offloads the next.
    let given = nnode_reports(&mut s, n1, &[], vec![succeeded(t1.0, t1.1)])
        .expect("heartbeat")
        .assignments;
    assert_eq!(given.len(), 1);
    let t2 = (given[0].task_id, given[0].attempt);
    let (ok, running) = ("succeeded".to_string(), "running".to_string());
    let (n1_name, anode) = ("n1".to_string(), "anode".to_string());
    let listed = ran_on(&s);
    assert!(
        listed.contains(&(t1.0, ok.clone(), n1_name.clone(), anode.clone()))
            && listed.contains(&(t2.0, running.clone(), n1_name.clone(), anode.clone())),
        "{listed:?}"
    );

    // The disk fills: the commit of t2's result fails and memory is rolled back to the store,
    // which still names the ANode of both.
    s.simulate_full_disk(true);
    nnode_reports(&mut s, n1, &[], vec![succeeded(t2.0, t2.1)])
        .expect_err("the store refused the heartbeat's commit");
    assert!(s.is_paused());
    let listed = ran_on(&s);
    assert!(
        listed.contains(&(t1.0, ok.clone(), n1_name.clone(), anode.clone()))
            && listed.contains(&(t2.0, running.clone(), n1_name.clone(), anode.clone())),
        "after the rollback: {listed:?}"
    );
    // The store takes writes again: t2's result is recorded and, once the rebuilt binding
    // has both nodes again (from their heartbeats), the last task is offloaded.
    s.simulate_full_disk(false);
    std::thread::sleep(hetsched_server::state::PROBE_INTERVAL);
    assert_eq!(
        beat(&mut s, a, "A", true, &[]).offload_key,
        key,
        "the rebuilt state keeps the ANode's key: tickets already sent stay good"
    );
    nnode_reports(&mut s, n1, &[], vec![succeeded(t2.0, t2.1)]).expect("heartbeat");
    assert!(!s.is_paused());
    let given = beat(&mut s, n1, "A", false, &[]).assignments;
    assert_eq!(given.len(), 1, "the last task");
    let t3 = (given[0].task_id, given[0].attempt);

    // A restart: the stored ANode of every attempt is read back.
    drop(s);
    let mut s = reopen(&d, BindingKind::Plain);
    let mut listed = ran_on(&s);
    listed.sort();
    let mut want = vec![
        (t1.0, ok.clone(), n1_name.clone(), anode.clone()),
        (t2.0, ok, n1_name.clone(), anode.clone()),
        (t3.0, running, n1_name, anode),
    ];
    want.sort();
    assert_eq!(listed, want, "after the restart");
    // The nodes are heard from again, then the ANode stops beating and is declared dead: the
    // task it was running for n1 goes back to the queue.
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[t3]);
    std::thread::sleep(crate::common::SILENCE);
    beat(&mut s, n1, "A", false, &[t3]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let tasks = s.tasks(1).expect("tasks").tasks;
    let t = tasks.iter().find(|t| t.id == t3.0).expect("task");
    assert_eq!(t.state, "pending", "{t:?}");
}

/// An offloaded task is listed with the device of the ANode that ran it and its start there
/// (the result's `offload_devices`, `offload_started_ns`), not the device the NNode was seen
/// with at dispatch and the NNode's start; after a restart too. An agent that says neither
/// leaves the dispatch's device and the NNode's start, as before.
#[test]
fn an_offloaded_task_is_listed_with_the_anodes_device_and_its_start_there() {
    let (mut s, d, n1) = anode_and_n1("device", 2, 2);
    let given = beat(&mut s, n1, "A", false, &[]).assignments;
    let on = |device: u32| {
        given
            .iter()
            .find(|x| x.devices == [device])
            .map(|x| (x.task_id, x.attempt))
            .expect("n1 reaches the ANode's two devices")
    };
    let (first, second) = (on(0), on(1));
    // The first ran on the ANode's device 1 (the ANode picks its free devices); the second's
    // agents say nothing of the ANode.
    let told = pb::TaskResult {
        started_ns: 1_000,
        finished_ns: 9_000,
        offload_started_ns: 5_000,
        offload_devices: vec![1],
        ..succeeded(first.0, first.1)
    };
    let untold = pb::TaskResult {
        started_ns: 2_000,
        finished_ns: 8_000,
        ..succeeded(second.0, second.1)
    };
    nnode_reports(&mut s, n1, &[], vec![told, untold]).expect("heartbeat");
    let shown = |s: &State| {
        let mut v: Vec<(u64, Vec<u32>, u64, u64, String)> = s
            .tasks(1)
            .expect("tasks")
            .tasks
            .into_iter()
            .map(|t| {
                (
                    t.id,
                    t.devices,
                    t.started_ns,
                    t.finished_ns,
                    t.executed_node,
                )
            })
            .collect();
        v.sort();
        v
    };
    let mut want = vec![
        (first.0, vec![1], 5_000, 9_000, "anode".to_string()),
        (second.0, vec![1], 2_000, 8_000, "anode".to_string()),
    ];
    want.sort();
    assert_eq!(shown(&s), want);
    drop(s);
    let s = reopen(&d, BindingKind::Plain);
    assert_eq!(shown(&s), want, "after a restart");
}

/// An offloaded batch task's ANode leaves memory when its attempt ends (the task's row holds
/// it, and listings read it there): before, every offloaded task of a server's life stayed in
/// the accelerator sharing's map.
#[test]
fn an_ended_offloaded_batch_task_is_listed_from_its_row_not_memory() {
    let (mut s, _d) = open("offload-ended", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[]);
    // One task: the beat that brings its result offloads no other.
    let one = GPU_JOB.replace("tasks = 6", "tasks = 1");
    s.submit_named("job.toml", &one, "/tmp", "", "")
        .expect("submit");
    let r = beat(&mut s, n1, "A", false, &[]);
    let t = r.assignments.first().expect("offloaded").clone();
    assert_eq!(s.offloads_in_memory(), 1, "while it runs");
    let mut req = common::heartbeat_request(n1, &[], &[(t.task_id, t.attempt, true)]);
    req.rack = "A".into();
    s.heartbeat(req).expect("result");
    assert_eq!(s.offloads_in_memory(), 0, "its attempt ended");
    let tasks = s.tasks(1).expect("tasks").tasks;
    let listed = tasks.iter().find(|x| x.id == t.task_id).expect("task");
    assert_eq!(
        (
            listed.state.as_str(),
            listed.node.as_str(),
            listed.executed_node.as_str()
        ),
        ("succeeded", "n1", "anode")
    );
}

/// An ANode that dies while the server is down, and so is never heard from after its restart,
/// never rejoins the binding; the offloads read back that name it are still lost with it when
/// it is declared dead, as they are when it is heard from first. Before, they stayed running
/// until the NNode's agent reported the offload interrupted (an agent that never did, never).
#[test]
fn an_anode_never_heard_from_after_a_restart_still_loses_the_offloads_it_was_running() {
    let (mut s, d, n1) = anode_and_n1("silent", 1, 1);
    let given = beat(&mut s, n1, "A", false, &[]).assignments;
    assert_eq!(given.len(), 1, "n1 reaches one device");
    let t = (given[0].task_id, given[0].attempt);
    drop(s);
    let mut s = reopen(&d, BindingKind::Plain);
    // Only the NNode is heard from; the ANode is declared dead once its restart grace (at
    // least 5 s) is over.
    beat(&mut s, n1, "A", false, &[t]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    assert_eq!(ran_on(&s)[0].1, "running", "within the ANode's grace");
    std::thread::sleep(Duration::from_millis(5_100));
    beat(&mut s, n1, "A", false, &[t]);
    s.check_dead(crate::common::DEAD_TIMEOUT).expect("check");
    let nodes = s.nodes(true).nodes;
    let anode = nodes.iter().find(|n| n.name == "anode").expect("anode");
    assert!(!anode.alive, "{anode:?}");
    let tasks = s.tasks(1).expect("tasks").tasks;
    let listed = tasks.iter().find(|x| x.id == t.0).expect("task");
    assert_eq!(listed.state, "pending", "{listed:?}");
    assert!(listed.message.contains("anode"), "{listed:?}");
}

/// Offload tickets: only the ANode is told its offload key (NNodes and unbound nodes never
/// are), and every offload an NNode is sent carries a ticket that key verifies for exactly
/// that task, attempt, account (its job's owner's, as its spec says), NNode and ANode — no
/// other. Without tickets any holder of the agent token could run any command as any account
/// on an ANode (found by a security review).
#[test]
fn an_offload_carries_a_ticket_only_its_anodes_key_verifies_and_only_the_anode_gets_a_key() {
    use hetsched_proto::ticket::{self, Offload};
    let (mut s, _d) = open("tickets", BindingKind::Plain);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    let nb = node(&mut s, "nb", 0, 1.0);
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[]);
    beat(&mut s, nb, "B", false, &[]);
    let epoch_now = || {
        hetsched_server::tickets::key_epoch(
            hetsched_server::state::now_ns() / 1_000_000,
            hetsched_server::tickets::OFFLOAD_KEY_PERIOD_MS,
        )
    };
    let before = epoch_now();
    let told = beat(&mut s, a, "A", true, &[]);
    let after = epoch_now();
    assert_eq!(
        told.offload_key.len(),
        ticket::LEN,
        "the ANode is told its key"
    );
    // Its keys of the previous, current and next epochs (the server rotates them), the current
    // one also alone.
    let keys = told.offload_keys;
    let epochs: Vec<u64> = keys.iter().map(|k| k.epoch).collect();
    assert!(
        (before..=after).any(|e| epochs == [e - 1, e, e + 1]),
        "{epochs:?}"
    );
    assert_eq!(keys[1].key, told.offload_key);
    assert!(keys.iter().all(|k| k.key.len() == ticket::LEN));
    assert_ne!(keys[0].key, keys[1].key, "a key per epoch");
    assert_eq!(
        beat(&mut s, a, "A", true, &[]).offload_keys,
        keys,
        "the same keys at every beat of an epoch"
    );
    s.on_add_user("alice", false).expect("alice");
    s.on_submit_as(
        hetsched_server::state::types::Submission {
            origin: "job.toml".into(),
            text: on_n1(1),
            workdir: "/tmp".into(),
            ..Default::default()
        },
        "alice",
    )
    .expect("submit");
    let before_ms = hetsched_server::state::now_ns() / 1_000_000;
    let r = beat(&mut s, n1, "A", false, &[]);
    assert!(r.offload_key.is_empty(), "an NNode is never told a key");
    assert!(r.offload_keys.is_empty());
    let other = beat(&mut s, nb, "B", false, &[]);
    assert!(other.offload_key.is_empty() && other.offload_keys.is_empty());
    assert_eq!(r.assignments.len(), 1, "{r:?}");
    let t = &r.assignments[0];
    assert_eq!(t.offload_anode, "anode");
    let spec = r.specs.iter().find(|x| x.key == t.spec).expect("spec sent");
    assert_eq!(spec.run_as, "alice");
    let offload = Offload {
        task_id: t.task_id,
        attempt: t.attempt,
        run_as: &spec.run_as,
        nnode: "n1",
        anode: "anode",
        runs: ticket::offload_digest(spec, t.index, t.entry.as_deref(), t.devices.len() as u32),
    };
    // The key of the epoch the ticket names, which the ANode was told.
    let epoch = ticket::offload_key_epoch(&t.offload_ticket).expect("a ticket of this version");
    let key = keys
        .iter()
        .find(|k| k.epoch == epoch)
        .map(|k| k.key.clone())
        .expect("the ANode holds the key of the ticket's epoch");
    let valid = ticket::open_offload(&key, &offload, &t.offload_ticket);
    let valid = valid.unwrap_or_else(|| {
        panic!(
            "the ANode's key verifies the ticket: {:?}",
            t.offload_ticket
        )
    });
    // Issued at this beat (the clock read before and after it brackets the issue), it expires
    // the lifetime after.
    let after_ms = hetsched_server::state::now_ns() / 1_000_000;
    assert!(
        (before_ms..=after_ms).contains(&valid.issued_ms),
        "{valid:?}"
    );
    assert_eq!(
        valid.expires_ms - valid.issued_ms,
        hetsched_server::tickets::OFFLOAD_TICKET_LIFETIME_MS
    );
    let mut other_command = spec.clone();
    other_command.argv = vec!["sh".into(), "-c".into(), "id".into()];
    for other in [
        Offload {
            run_as: "",
            ..offload
        },
        Offload {
            run_as: "bob",
            ..offload
        },
        Offload {
            attempt: t.attempt + 1,
            ..offload
        },
        Offload {
            task_id: t.task_id + 1,
            ..offload
        },
        Offload {
            nnode: "nb",
            ..offload
        },
        // The ticket covers the command the server sent: another one does not pass.
        Offload {
            runs: ticket::offload_digest(&other_command, t.index, None, 1),
            ..offload
        },
    ] {
        assert!(
            ticket::open_offload(&key, &other, &t.offload_ticket).is_none(),
            "{other:?}"
        );
    }
}

/// The server's `[offload]` table sets how long a ticket lives and how often keys rotate: an
/// offload's ticket expires the configured lifetime after its issue, under the key of the
/// configured period's epoch, which its ANode was told.
#[test]
fn a_ticket_expires_and_its_key_rotates_as_the_offload_table_says() {
    use hetsched_proto::ticket::{self, Offload};
    let config = ServerConfig::parse(
        "server.toml",
        "[offload]\nticket_lifetime = \"30s\"\nkey_rotation = \"2h\"\n",
    )
    .expect("config");
    let (mut s, _d) = open_with("ticket-lifetime", config);
    let a = node(&mut s, "anode", 1, 1.0);
    let n1 = node(&mut s, "n1", 0, 1.0);
    beat(&mut s, a, "A", true, &[]);
    beat(&mut s, n1, "A", false, &[]);
    let now_ms = || hetsched_server::state::now_ns() / 1_000_000;
    let before = now_ms() / 7_200_000;
    let keys = beat(&mut s, a, "A", true, &[]).offload_keys;
    let epochs: Vec<u64> = keys.iter().map(|k| k.epoch).collect();
    assert!(
        (before..=now_ms() / 7_200_000).any(|e| epochs == [e - 1, e, e + 1]),
        "epochs of two hours: {epochs:?}"
    );
    s.on_submit(hetsched_server::state::types::Submission {
        origin: "job.toml".into(),
        text: on_n1(1),
        workdir: "/tmp".into(),
        ..Default::default()
    })
    .expect("submit");
    let r = beat(&mut s, n1, "A", false, &[]);
    assert_eq!(r.assignments.len(), 1, "{r:?}");
    let t = &r.assignments[0];
    let spec = r.specs.iter().find(|x| x.key == t.spec).expect("spec sent");
    let offload = Offload {
        task_id: t.task_id,
        attempt: t.attempt,
        run_as: &spec.run_as,
        nnode: "n1",
        anode: "anode",
        runs: ticket::offload_digest(spec, t.index, t.entry.as_deref(), t.devices.len() as u32),
    };
    let epoch = ticket::offload_key_epoch(&t.offload_ticket).expect("a ticket");
    let key = keys
        .iter()
        .find(|k| k.epoch == epoch)
        .expect("the ANode holds the key of the ticket's epoch");
    let valid = ticket::open_offload(&key.key, &offload, &t.offload_ticket).expect("verifies");
    assert_eq!(valid.expires_ms - valid.issued_ms, 30_000, "{valid:?}");
    assert!(!valid.expired(valid.issued_ms + 30_000));
    assert!(valid.expired(valid.issued_ms + 30_001));
}
