//! What one job may carry, and what one heartbeat reply may hold: commands and environments are
//! bounded at submission; each application's command travels to a node once, not once per task;
//! a reply stays under its size cap and the rest follows on the next beats.

use crate::common;
use crate::common::Scratch;

use common::{IDENTITY, heartbeat_request};
use hetsched_proto as pb;
use hetsched_server::ServerConfig;
use hetsched_server::convert::Wire;
use hetsched_server::state::{REPLY_BUDGET, State};
use hetsched_server::store::Store;
use prost::Message;
use std::collections::BTreeSet;

fn open(name: &str) -> (State, Scratch) {
    let d = Scratch::new("bounds", name);
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    let s = State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    (s, d)
}

fn register(s: &mut State, cores: u32) -> u32 {
    s.register(pb::RegisterRequest {
        name: "big".into(),
        cores,
        memory_bytes: 1 << 40,
        identity: IDENTITY.into(),
        ..Default::default()
    })
    .expect("register")
    .node_id
}

fn app(name: &str, tasks: u32, command_bytes: usize, env_bytes: usize) -> String {
    let mut s = format!(
        "[[application]]\nname = \"{name}\"\ntasks = {tasks}\n[application.cpu]\ncommand = \"true #{}\"\n",
        "x".repeat(command_bytes)
    );
    if env_bytes > 0 {
        s += &format!(
            "[application.cpu.env]\nPAD = \"{}\"\n",
            "e".repeat(env_bytes)
        );
    }
    s
}

#[test]
fn a_one_mebibyte_command_is_refused_at_submission_with_the_limit() {
    let (mut s, d) = open("huge");
    let e = s
        .submit("huge.toml", &app("a", 1, 1 << 20, 0), "/")
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("application[0].cpu.command: the command is 1048582 bytes; at most 65536"),
        "{e}"
    );
    assert!(s.jobs().jobs.is_empty(), "nothing stored");
    let e = s
        .submit("evil.toml", &app("../../etc", 1, 1, 0), "/")
        .expect_err("refused");
    assert!(e.to_string().contains("application[0].name"), "{e}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_workflow_is_bounded_at_submission_as_a_batch_job_is() {
    let (mut s, d) = open("workflow");
    let task = |name: &str, instances: u64, command_bytes: usize| {
        format!(
            "[[task]]\nname = \"{name}\"\ninstances = {instances}\ncommand = \"true #{}\"\n",
            "x".repeat(command_bytes)
        )
    };
    for (text, says) in [
        (
            task("a", 1, 1 << 20),
            "task[0].command: the command is 1048582 bytes; at most 65536",
        ),
        (
            task("a", 2_000_000, 1),
            "the workflow has 2000000 instances (processes included); at most 1000000",
        ),
        (task("../../etc", 1, 1), "task[0].name"),
    ] {
        let e = s.submit("wf.toml", &text, "/").expect_err("refused");
        assert!(e.to_string().contains(says), "{e}");
    }
    assert!(s.jobs().jobs.is_empty(), "nothing stored");
    s.submit("wf.toml", &task("a", 1_000_000, 60_000), "/")
        .expect("a million instances of a 60 KB command are fine");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn sixty_four_tasks_of_a_60_kb_command_fit_one_reply_with_the_command_sent_once() {
    let (mut s, d) = open("sixty-four");
    let n = register(&mut s, 64);
    s.submit("job.toml", &app("wide", 128, 60_000, 0), "/")
        .expect("a 60 KB command is accepted");
    let r = s
        .heartbeat(heartbeat_request(n, &[], &[]))
        .expect("heartbeat");
    assert_eq!(r.assignments.len(), 64, "every core gets a task");
    assert_eq!(r.specs.len(), 1, "the command travels once");
    assert!(!r.more);
    let bytes = r.encoded_len();
    assert!(
        bytes < 70_000,
        "{bytes} bytes for 64 tasks of a 60 KB command"
    );
    // The agent now holds the spec and says so: the next 64 tasks come without it.
    let results: Vec<(u64, u32, bool)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt, true))
        .collect();
    let mut beat = heartbeat_request(n, &[], &results);
    beat.known_specs = vec![r.specs[0].key];
    let r = s.heartbeat(beat).expect("heartbeat");
    assert_eq!(r.assignments.len(), 64);
    assert!(r.specs.is_empty(), "not sent again");
    assert!(r.encoded_len() < 4_000);
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_reply_stays_under_its_cap_and_the_rest_follows_on_the_next_beats() {
    let (mut s, d) = open("cap");
    let n = register(&mut s, 64);
    // 16 applications, each with a 60 KB command and a 60 KB environment: 1.9 MB of specs if
    // one reply carried them all (a job file under its 2 MiB limit).
    let text: String = (0..16)
        .map(|i| app(&format!("a{i}"), 1, 60_000, 60_000))
        .collect();
    s.submit("job.toml", &text, "/").expect("submit");
    let mut known = Vec::new();
    let mut running: Vec<(u64, u32)> = Vec::new();
    let mut beats = 0;
    loop {
        let mut beat = heartbeat_request(n, &running, &[]);
        beat.known_specs = known.clone();
        let r = s.heartbeat(beat).expect("heartbeat");
        beats += 1;
        assert!(
            r.encoded_len() <= REPLY_BUDGET,
            "reply {beats} is {} bytes",
            r.encoded_len()
        );
        known.extend(r.specs.iter().map(|x| x.key));
        running.extend(r.assignments.iter().map(|a| (a.task_id, a.attempt)));
        if !r.more {
            break;
        }
        assert!(beats < 20, "no progress");
    }
    assert!(beats >= 2, "the specs needed several replies, got {beats}");
    let tasks: BTreeSet<u64> = running.iter().map(|&(t, _)| t).collect();
    assert_eq!(tasks, (0..16).collect(), "every task dispatched once");
    assert_eq!(running.len(), 16);
    assert!(
        running.iter().all(|&(_, attempt)| attempt == 1),
        "none counted lost"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// A registration's attributes are bounded (count and length, no whitespace) and refused with
/// the node's name; accepted ones are sorted and deduplicated.
#[test]
fn a_nodes_attributes_are_bounded_at_registration() {
    let (mut s, d) = open("attributes");
    let with = |attributes: Vec<String>| pb::RegisterRequest {
        name: "n".into(),
        cores: 1,
        memory_bytes: 1 << 30,
        identity: IDENTITY.into(),
        attributes,
        ..Default::default()
    };
    for (bad, says) in [
        (vec!["x".repeat(65)], "longer than 64 bytes"),
        (vec!["two words".into()], "whitespace"),
        (vec![String::new()], "must not be empty"),
        ((0..65).map(|i| format!("a{i}")).collect(), "at most 64"),
    ] {
        let e = s.register(with(bad)).expect_err("refused");
        assert!(e.to_string().contains("node `n`"), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    s.register(with(vec!["ssd".into(), "bigmem".into(), "ssd".into()]))
        .expect("accepted");
    let attributes = |s: &State| s.nodes(true).nodes[0].attributes.clone();
    assert_eq!(attributes(&s), ["bigmem", "ssd"]);
    // Stored with the node: a restarted server knows them before the agent comes back.
    drop(s);
    let config = ServerConfig {
        data_dir: d.clone(),
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    assert_eq!(attributes(&s), ["bigmem", "ssd"]);
    // An agent registering again with other attributes has them, and so does the store.
    s.register(with(vec!["fpga".into()])).expect("again");
    assert_eq!(attributes(&s), ["fpga"]);
    drop(s);
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    assert_eq!(attributes(&s), ["fpga"]);
    s.register(with(vec!["ssd".into(), "bigmem".into()]))
        .expect("back to the first ones");
    let e = s
        .submit(
            "j.toml",
            "[[application]]\nname = \"a\"\ntasks = 1\nrequires = [\"fpga\"]\n\
             [application.cpu]\ncommand = \"true\"\n",
            "/",
        )
        .expect_err("no fpga node");
    assert!(
        e.to_string()
            .contains("requires `fpga`, which no node has (attributes offered: bigmem, ssd)"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(d);
}

/// The submitter's working directory (a job's) and base directory (a topology's) are checked
/// before they are stored: a NUL, a newline or a terminal escape, or a relative path, is refused
/// naming it (before, a raw client's was stored, and its tasks ran in the agent's directory).
#[test]
fn a_working_or_base_directory_with_control_characters_or_relative_is_refused() {
    let (mut s, d) = open("workdir");
    for (dir, says) in [
        ("/tmp/a\0b", "holds a control character"),
        ("/tmp/a\n\u{1b}[31mred", "holds a control character"),
        ("tmp/a", "is not an absolute path"),
    ] {
        let e = s
            .submit("job.toml", &app("a", 1, 1, 0), dir)
            .expect_err("refused");
        assert!(
            e.to_string().contains("the working directory") && e.to_string().contains(says),
            "{dir:?}: {e}"
        );
        let topo = hetsched_server::jobs::topology::TopologySubmission {
            origin: "t.toml".into(),
            text:
                "name = \"t\"\n\n[[component]]\nname = \"s\"\nkind = \"spout\"\nparallelism = 1\n\
                   cpu = 10.0\nbuiltin = \"sequence-spout\"\n"
                    .into(),
            base_dir: dir.into(),
            placer: "even".into(),
            max_utilisation: 0.9,
            ..Default::default()
        };
        let e = s.topology_submit(topo).expect_err("refused");
        assert!(
            e.to_string().contains("the base directory") && e.to_string().contains(says),
            "{dir:?}: {e}"
        );
    }
    assert!(s.jobs().jobs.is_empty(), "nothing stored");
    assert_eq!(s.topology_list().as_array().map_or(1, Vec::len), 0);
    let _ = std::fs::remove_dir_all(d);
}

/// A topology's envelope is bounded as a job's is: its file at most 2 MiB (its text goes to
/// every agent that runs one of its workers, at every sync), its origin at most 4,096 bytes
/// without control characters (shown in every status), and its reschedule interval at most
/// the longest duration a file may give (10 years) — an interval in ms is counted in ns, and
/// `u64::MAX` ms overflowed there: a panic under the state's lock in a debug build, a
/// meaningless interval in a release one.
#[test]
fn a_topologys_file_origin_and_interval_are_bounded_at_submission() {
    let (mut s, d) = open("topology-envelope");
    let text = "name = \"t\"\n\n[[component]]\nname = \"s\"\nkind = \"spout\"\nparallelism = 1\n\
                cpu = 10.0\nbuiltin = \"sequence-spout\"\n";
    let topo = |origin: &str, text: String, interval_ms: u64| {
        hetsched_server::jobs::topology::TopologySubmission {
            origin: origin.into(),
            text,
            base_dir: "/".into(),
            placer: "even".into(),
            interval_ms,
            max_utilisation: 0.9,
            ..Default::default()
        }
    };
    let huge = format!("{text}# {}\n", "x".repeat(3 << 20));
    let origin_nl = "t.toml\n\u{1b}[31mred";
    let long_origin = "o".repeat(5000);
    for (sub, says) in [
        (
            topo("t.toml", text.into(), u64::MAX),
            "interval: 18446744073709551615 ms is longer than the longest accepted",
        ),
        (
            topo("t.toml", huge, 0),
            "t.toml: the topology file is 3145837 bytes; at most 2097152 (2 MiB)",
        ),
        (
            topo(origin_nl, text.into(), 0),
            "the file's name must be at most 4096 bytes without control characters",
        ),
        (
            topo(&long_origin, text.into(), 0),
            "the file's name must be at most 4096 bytes without control characters",
        ),
    ] {
        let e = s.topology_submit(sub).expect_err("refused").to_string();
        assert!(e.contains(says), "{e}");
    }
    assert_eq!(s.topology_list().as_array().map_or(1, Vec::len), 0);
    // The longest interval accepted is taken.
    let ten_years_ms = hetsched_core::input::MAX_DURATION / 1_000_000;
    s.topology_submit(topo("t.toml", text.into(), ten_years_ms))
        .expect("ten years is accepted");
    let _ = std::fs::remove_dir_all(d);
}

/// What an agent says of a task's attempt stays with the task until its job is purged: a
/// result's message is cut to `MAX_RESULT_MESSAGE` bytes (on a character boundary, marked);
/// its usage figures, an agent's u64s, add up saturating in the application's and the job's
/// totals. Before, a 2 MiB message was kept whole for every task, and two tasks' CPU times
/// near the top of u64 overflowed their sum under the state's lock (a panic in a debug build).
#[test]
fn a_results_message_is_cut_and_its_usage_adds_up_saturating() {
    use hetsched_server::limits::MAX_RESULT_MESSAGE;
    let (mut s, d) = open("result-bounds");
    let n = register(&mut s, 2);
    let job = s
        .submit("job.toml", &app("a", 2, 1, 0), "/")
        .expect("submit")
        .job_id;
    let r = s
        .heartbeat(heartbeat_request(n, &[], &[]))
        .expect("heartbeat");
    assert_eq!(r.assignments.len(), 2);
    let failed: Vec<(u64, u32, bool)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt, false))
        .collect();
    let mut beat = heartbeat_request(n, &[], &failed);
    for res in &mut beat.results {
        res.message = "é".repeat(1 << 20);
        res.usage = Some(pb::TaskUsage {
            cpu_user_ms: u64::MAX - 1,
            cpu_system_ms: 7,
            max_rss_bytes: 1,
            max_gpu_memory_bytes: 0,
        });
    }
    s.heartbeat(beat).expect("heartbeat");
    let tasks = s.tasks(job).expect("tasks").tasks;
    assert_eq!(tasks.len(), 2);
    for t in &tasks {
        assert_eq!(t.state, "failed", "{}", t.state);
        assert!(
            t.message.len() <= MAX_RESULT_MESSAGE && t.message.ends_with("é…"),
            "{} bytes",
            t.message.len()
        );
    }
    let info = s.job(job).expect("job");
    assert_eq!(info.cpu_ms, u64::MAX);
    assert!(
        info.apps.iter().all(|a| a.cpu_ms == u64::MAX),
        "{:?}",
        info.apps
    );
    let _ = std::fs::remove_dir_all(d);
}

/// What an agent says of an attempt may quote what the task's owner wrote (its command, in
/// "cannot start `…`"), and every user's `hetsched tasks` prints it: its control characters
/// but `\n` are kept escaped (`\u{1b}`), so no ANSI escape reaches another user's terminal (an
/// OSC 52 sets its clipboard, a `\r` or a cursor move hides what the line said), and a long
/// run of them is still cut to `MAX_RESULT_MESSAGE` bytes. Before, the message was kept and
/// listed byte for byte.
#[test]
fn a_results_message_keeps_no_terminal_escape_and_stays_bounded_once_escaped() {
    use hetsched_server::limits::MAX_RESULT_MESSAGE;
    let (mut s, d) = open("result-escapes");
    let n = register(&mut s, 2);
    let job = s
        .submit("job.toml", &app("a", 2, 1, 0), "/")
        .expect("submit")
        .job_id;
    let r = s
        .heartbeat(heartbeat_request(n, &[], &[]))
        .expect("heartbeat");
    assert_eq!(r.assignments.len(), 2);
    let failed: Vec<(u64, u32, bool)> = r
        .assignments
        .iter()
        .map(|a| (a.task_id, a.attempt, false))
        .collect();
    let mut beat = heartbeat_request(n, &[], &failed);
    beat.results[0].message =
        "cannot start `\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\u{7}x\u{9b}2J`: No such file\r\nok\tthen"
            .into();
    beat.results[1].message = "\u{1b}".repeat(1 << 20);
    s.heartbeat(beat).expect("heartbeat");
    let tasks = s.tasks(job).expect("tasks").tasks;
    let message = |task: u64| {
        tasks
            .iter()
            .find(|t| t.id == task)
            .map(|t| t.message.clone())
            .expect("the task")
    };
    assert_eq!(
        message(failed[0].0),
        "cannot start `\\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\\u{7}x\\u{9b}2J`: No such file\\r\nok\\tthen"
    );
    let long = message(failed[1].0);
    assert!(long.len() <= MAX_RESULT_MESSAGE, "{} bytes", long.len());
    assert!(
        long.starts_with("\\u{1b}\\u{1b}") && long.ends_with('…'),
        "{long}"
    );
    for t in &tasks {
        assert!(
            !t.message.chars().any(|c| c.is_control() && c != '\n'),
            "{:?}",
            t.message
        );
    }
    let _ = std::fs::remove_dir_all(d);
}

/// The cluster's cores, memory and devices in all are bounded at registration: each node is
/// bounded (65,536 cores, 1 PiB), but 65,536 such agents overflowed the scheduler's `u32` sum of
/// cores (a panic in debug builds), and 16,384 its `u64` sum of memory. The registration that
/// would pass is refused naming the node; a dead node removed gives its share back.
#[test]
fn the_clusters_resources_in_all_are_bounded_at_registration() {
    let (mut s, d) = open("in-all");
    const PIB: u64 = 1 << 50;
    let node = |i: u32, cores: u32, memory_bytes: u64| pb::RegisterRequest {
        name: format!("n{i}"),
        cores,
        memory_bytes,
        identity: IDENTITY.into(),
        ..Default::default()
    };
    for i in 0..16_383 {
        s.register(node(i, 1, PIB)).expect("under 16 EiB in all");
    }
    let e = s.register(node(16_383, 1, PIB)).expect_err("16 EiB in all");
    assert_eq!(
        e.to_string(),
        "node `n16383` would bring the cluster to 18446744073709551616 bytes of memory; at most \
         18446744073709551615 (16 EiB) in all (`hetsched node remove` removes dead nodes)"
    );
    assert_eq!(s.nodes(true).nodes.len(), 16_383);
    // One node less memory, and it fits.
    s.register(node(16_383, 1, PIB - 1)).expect("just under");
    // A node registered again with more keeps its description, and its agent is told why.
    let reply = s.register(node(16_383, 1, PIB)).expect("registered again");
    assert!(
        reply.note.contains("keeps this node's earlier description")
            && reply
                .note
                .contains("node `n16383` would bring the cluster to 18446744073709551616"),
        "{}",
        reply.note
    );
    assert_eq!(s.nodes(true).nodes[16_383].memory_bytes, PIB - 1);
    let _ = std::fs::remove_dir_all(d);
}

/// The accelerator binding shows a node without devices with those of the ANodes it reaches
/// (`container` binding: one ANode per container), and adds them to the scheduler's total of
/// devices after registration, where nothing refused them: 4,096 ANodes of 256 devices and
/// 4,095 nodes without, each binding 4,096 containers, could come to 2^32 devices, past the
/// view's `u32` total. Registration counts each node without devices as the most it may be
/// shown with, and refuses the node that would pass, naming the sum.
#[test]
fn the_devices_the_binding_may_show_in_all_are_bounded_at_registration() {
    let d = Scratch::new("bounds", "reach");
    let config = ServerConfig {
        data_dir: d.clone(),
        binding: hetsched_server::config::BindingKind::Container,
        binding_slots: 4096,
        ..Default::default()
    };
    let mut s =
        State::open(&config, Store::open(&d.join("state.db")).expect("store")).expect("state");
    let node = |name: String, devices: usize| pb::RegisterRequest {
        name,
        cores: 1,
        memory_bytes: 1 << 30,
        accelerators: vec![
            pb::Accelerator {
                kind: "k".into(),
                memory_bytes: 1 << 30,
                speed: 1.0,
            };
            devices
        ],
        identity: IDENTITY.into(),
        ..Default::default()
    };
    // 2^20 devices in all, each node without any may be shown with all of them.
    for i in 0..4096 {
        s.register(node(format!("a{i}"), 256)).expect("an ANode");
    }
    for i in 0..4094 {
        s.register(node(format!("n{i}"), 0))
            .expect("under 2^32 devices as seen");
    }
    let e = s
        .register(node("n4094".into(), 0))
        .expect_err("2^32 devices as seen");
    assert_eq!(
        e.to_string(),
        "node `n4094` would bring the cluster to 4294967296 accelerators as the scheduler may \
         see them (1048576 on nodes that have them, and 4095 nodes without any, which the \
         accelerator binding may each show with up to 1048576 of them); at most 4294967295 in \
         all (`hetsched node remove` removes dead nodes)"
    );
    assert_eq!(s.nodes(true).nodes.len(), 4096 + 4094);
    let _ = std::fs::remove_dir_all(d);
}

/// An agent's heartbeat says how long tasks may still run on its node (`time_left_ms`): a value
/// past any sane clock (`u64::MAX` ms) was taken as an end 584 million years away, listed so,
/// and wrapped the scheduler view's nanosecond clock. A time left past 10 years (the longest an
/// agent's `time_limit` may be) is taken as no end; a sane one still holds.
#[test]
fn an_agents_time_left_past_ten_years_is_no_end() {
    use hetsched_server::state::types::HeartbeatReport;
    let (mut s, d) = open("time-left");
    let id = register(&mut s, 2);
    let beat = |s: &mut State, left: std::time::Duration| {
        s.on_heartbeat(HeartbeatReport {
            node_id: id,
            identity: IDENTITY.into(),
            time_left: Some(left),
            ..Default::default()
        })
        .expect("beat");
        s.nodes(true).nodes[0].time_left_ms
    };
    assert_eq!(
        beat(&mut s, std::time::Duration::from_millis(u64::MAX)),
        None
    );
    let ten_years_and_a_day = std::time::Duration::from_secs((10 * 365 + 1) * 24 * 3600);
    assert_eq!(beat(&mut s, ten_years_and_a_day), None);
    let hour = beat(&mut s, std::time::Duration::from_secs(3600)).expect("an end");
    assert!((3_500_000..=3_600_000).contains(&hour), "{hour}");
    let _ = std::fs::remove_dir_all(d);
}

/// A request over the server's stated message bound (`service::MAX_REQUEST_BYTES`, 4 MiB: what
/// the CLI checks before it sends a submission) is refused with `OutOfRange`, naming the size
/// found and the bound; one under it is decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_message_bound_is_refused_naming_the_bound() {
    let d = common::scratch("bounds", "message-bound");
    let config = ServerConfig {
        data_dir: d.to_path_buf(),
        ..Default::default()
    };
    let (server, channel) = common::serve(config).await;
    let mut api =
        pb::client_client::ClientClient::with_interceptor(channel, common::client_token(&server));
    let bound = hetsched_server::service::MAX_REQUEST_BYTES;
    assert_eq!(bound, 4 << 20);
    // A job file with a comment that takes it over the bound.
    let job = |bytes: usize| pb::SubmitRequest {
        origin: "big.toml".into(),
        text: format!(
            "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\n#{}\n",
            "x".repeat(bytes)
        ),
        hold: true,
        ..Default::default()
    };
    let e = api.submit(job(bound)).await.expect_err("over the bound");
    assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
    assert!(
        e.message()
            .contains(&format!("the limit is: {bound} bytes")),
        "{e:?}"
    );
    // Under the bound the message is decoded: the server's own checks decide.
    if let Err(e) = api.submit(job(bound / 2)).await {
        assert!(!e.message().contains("decoded message length"), "{e:?}");
    }
    server.stop().await.expect("stopped");
}
