//! What a first-time operator sees: listings and errors that say the truth about a job, in words.

use crate::support::{Cluster, wait_until};
use hetsched_core::testkit::ScratchDir;
use std::time::Duration;

/// A job held while its task runs, which then completes, is listed `completed`, not `held`:
/// `held`, `waiting` and `deferred` describe a pending or running job only, although the server
/// keeps the flag on the finished job. `wait` does not say it waits for a release, `job N` does
/// not tell to release it, and `jobs --state held` does not select it.
#[test]
fn a_job_held_while_running_that_completes_is_listed_completed() {
    let mut c = Cluster::start("ux-held-done", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "1"]);
    wait_until("the task to run", Duration::from_secs(10), || {
        c.json(&["job", "1"])["counts"]["running"] == 1
    });
    c.ok(&["hold", "1"]);
    let out = c.cli(&["wait", "1"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("is held"), "{err}");
    let listed = c.ok(&["jobs"]);
    assert!(
        listed.contains("completed") && !listed.contains("held"),
        "{listed}"
    );
    let shown = c.ok(&["job", "1"]);
    assert!(
        shown.contains("completed") && !shown.contains("held"),
        "{shown}"
    );
    let held = c.json(&["jobs", "--state", "held"]);
    assert_eq!(held.as_array().map(Vec::len), Some(0), "{held}");
    let done = c.json(&["jobs", "--state", "completed"]);
    assert_eq!(done[0]["id"], 1, "{done}");
}

/// A refusal reads as words, without gRPC's code names: a user that exists already, and a
/// `--server` that names an agent's port (gRPC, but not the server's client service).
#[test]
fn refusals_say_what_went_wrong_without_grpc_code_names() {
    let mut c = Cluster::start("ux-refusals", false);
    c.add_user("alice");
    let out = c.cli(&["user", "add", "alice"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.starts_with("error: user `alice` exists: `hetsched user add alice --rotate`"),
        "{err}"
    );
    assert!(!err.contains("AlreadyExists"), "{err}");
    // An agent's log listener speaks gRPC, not the client service.
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let log = c.agent_log("a");
    let port = log
        .split("serving task outputs to the server addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.rsplit(':').next())
        .expect("the agent's log port")
        .to_string();
    let out = c
        .command(&["jobs"])
        .env("HETSCHED_SERVER", format!("127.0.0.1:{port}"))
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("the server does not offer this call: is --server"),
        "{err}"
    );
    assert!(!err.contains("Unimplemented"), "{err}");
}

/// `submit -- COMMAND` to an address where nothing listens retries, then gives up, saying each
/// cause once (it said `tcp connect error: tcp connect error`).
#[test]
fn a_submission_nothing_answers_says_each_cause_once() {
    let c = Cluster::start("ux-nothing-answers", false);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let out = c
        .command(&["submit", "--", "true"])
        .env("HETSCHED_SERVER", format!("127.0.0.1:{port}"))
        .env("HETSCHED_SUBMIT_RETRY_FOR", "2s")
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    // 0.2 + 0.4 + 0.8 s of backoff fit in 2 s, the next 1.6 s would not: 4 tries.
    assert!(
        err.contains("retrying in")
            && err.contains("error: gave up after 4 tries in ")
            && err.contains(" s (HETSCHED_SUBMIT_RETRY_FOR: 2s): nothing answers at"),
        "{err}"
    );
    assert!(
        !err.contains("tcp connect error: tcp connect error"),
        "{err}"
    );
}

/// `cancel`, `hold`, `release`, `update` and `signal` of one job answer in JSON with its
/// `job_id`, as each entry of several jobs has it: `cancel last --output json` says which job.
#[test]
fn one_jobs_cancel_hold_release_update_signal_json_names_the_job() {
    let mut c = Cluster::start("ux-one-job-json", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--hold", "--tasks", "2", "--", "sleep", "30"]);
    for args in [
        &["release", "last"][..],
        &["hold", "last"],
        &["update", "last", "--priority", "3"],
        &["signal", "last", "--signal", "USR1"],
        &["cancel", "last"],
    ] {
        let v = c.json(args);
        assert_eq!(v["job_id"], 1, "{args:?}: {v}");
    }
    // Several jobs: an array, each entry with its `job_id`, as before.
    let v = c.json(&["cancel", "1,1"]);
    assert_eq!(v[0]["job_id"], 1, "{v}");
}

/// `hetsched log JOB` without a task says both ways to call it: one task, or `--all` (the usage
/// line showed only `<JOB> <TASK>`, and `--all` was found in the help only).
#[test]
fn log_without_a_task_shows_the_all_form_too() {
    let out = std::process::Command::new(crate::support::BIN)
        .args(["log", "1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("hetsched log [OPTIONS] <JOB> <TASK>")
            && err.contains("hetsched log [OPTIONS] <JOB> --all"),
        "{err}"
    );
}

/// `user limit --output json` says `null` for a cap the user does not have, as `user list`
/// does (it said 0, which a script reads as a cap of nothing): every field of the user agrees.
#[test]
fn user_limit_and_user_list_json_agree_on_no_cap() {
    let c = Cluster::start("ux-limit-json", false);
    c.add_user("alice");
    let limited = c.json(&["user", "limit", "alice", "--max-cores", "2"]);
    assert_eq!(limited["max_cores"], 2, "{limited}");
    for key in ["max_memory_bytes", "max_gpus", "max_priority"] {
        assert_eq!(limited[key], serde_json::Value::Null, "{key}: {limited}");
    }
    let listed = c.json(&["user", "list"]);
    let alice = &listed[0];
    assert_eq!(alice["name"], "alice", "{listed}");
    for (key, value) in limited.as_object().expect("an object") {
        assert_eq!(&alice[key], value, "{key}: {limited} against {alice}");
    }
    // A cap removed reads as none too.
    let limited = c.json(&["user", "limit", "alice", "--max-cores", "none"]);
    assert_eq!(limited["max_cores"], serde_json::Value::Null, "{limited}");
    assert_eq!(
        c.json(&["user", "list"])[0]["max_cores"],
        serde_json::Value::Null
    );
}

/// A `--max-memory` that is not a size is refused in one message that names the flag and the
/// value once and says what a size is, without the `bytesize` crate's own words
/// (`couldn't parse "lots" into a ByteSize, cannot parse float from empty string`).
#[test]
fn a_bad_max_memory_is_refused_once_with_the_accepted_forms() {
    let out = std::process::Command::new(crate::support::BIN)
        .args(["user", "limit", "alice", "--max-memory", "lots"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error: invalid value 'lots' for '--max-memory <SIZE>': it is not a size such as \
             512MiB, 8GiB or 2GB"
        ) && err.contains("nor `none` for no cap"),
        "{err}"
    );
    assert_eq!(err.matches("lots").count(), 1, "{err}");
    assert!(!err.contains("parse"), "{err}");
}

/// A rolling upgrade needs to see what runs where: `hetsched nodes` lists each agent's version
/// (JSON and table), `hetsched user whoami` the server's, and an agent of the server's own
/// version logs no version warning.
#[test]
fn nodes_list_each_agents_version_and_whoami_the_servers() {
    let version = env!("CARGO_PKG_VERSION");
    let mut c = Cluster::start("ux-versions", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let nodes = c.json(&["nodes"]);
    assert_eq!(nodes[0]["version"], version, "{nodes}");
    let table = c.ok(&["nodes"]);
    let header = table.lines().find(|l| l.contains("node")).expect("header");
    let row = table.lines().find(|l| l.contains(" a ")).expect("a's row");
    assert!(
        header.contains("version") && row.contains(version),
        "{table}"
    );
    let me = c.json(&["user", "whoami"]);
    assert_eq!(me["server_version"], version, "{me}");
    // The name alone on standard output, as scripts read it; the versions on standard error.
    let out = c.cli(&["user", "whoami"]);
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert_eq!(said.trim(), "admin (the admin token)", "{said}");
    assert!(
        err.contains(&format!(
            "server: hetsched {version} (this client: {version})"
        )),
        "{err}"
    );
    assert!(
        !c.agent_log("a").contains("the server runs hetsched"),
        "{}",
        c.agent_log("a")
    );
}

/// A script submitted as the command without its execute bit (`sbatch` runs such scripts, so
/// Slurm users write them) is refused at submission, saying how to run it, instead of being
/// stored as a job whose every task fails with `Permission denied` on its node.
#[test]
fn a_script_that_is_not_executable_is_refused_at_submission_saying_how_to_run_it() {
    use std::os::unix::fs::PermissionsExt;
    let c = Cluster::start("ux-not-executable", false);
    let script = c.dir.join("job.sh");
    std::fs::write(&script, "#!/bin/sh\n#HETSCHED --tasks 3\necho hi\n").expect("script");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    for program in ["./job.sh", script.to_str().expect("path")] {
        c.refused(
            &["submit", "--", program],
            &format!("`{program}` is not executable: `chmod +x {program}`, or run it with its shell (`-- sh {program}`)"),
        );
    }
    assert_eq!(c.json(&["jobs"]), serde_json::json!([]), "nothing stored");
}

/// `log --follow` on a task that has not started yet (its job held, waiting for another, or
/// queued behind busy nodes) waits for it to start and then follows it, as `tail -F` waits for
/// its file: `submit … && log last APP:0 --follow` works however soon it runs. It failed at
/// once, saying the task had not run yet.
#[test]
fn log_follow_waits_for_a_task_that_has_not_started_yet() {
    use std::process::Stdio;
    let mut c = Cluster::start("ux-follow-pending", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--hold",
        "--app",
        "greet",
        "--shell",
        "--",
        "echo first; sleep 1; echo second",
    ]);
    let mut follow = c
        .command(&["log", "1", "greet:0", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hetsched log");
    std::thread::sleep(Duration::from_millis(1500));
    let early = follow.try_wait().expect("try_wait");
    if early.is_none() {
        c.ok(&["release", "1"]);
        wait_until("log --follow to end", Duration::from_secs(30), || {
            follow.try_wait().expect("try_wait").is_some()
        });
    }
    let out = follow.wait_with_output().expect("log output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(early.is_none(), "it waited for the held task: {err}");
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "first\nsecond\n");
    assert!(
        err.contains("task 0 (greet:0) has not started yet (pending): waiting for it"),
        "{err}"
    );
}

/// A server left idle for longer than two retention intervals (5 s each), then sent work,
/// does not take its quiet time for a stall of its own: it warns of no stall and gives no node
/// a fresh dead timeout. Before, the reaper measured its lateness from a retention pass due
/// while nothing woke it, so every call after a quiet spell logged `the server did not listen
/// for this long` (a reviewer counted 74 in 49 minutes of normal load) and a node that had just
/// died waited that much longer to be declared dead.
#[test]
fn a_server_woken_after_a_quiet_spell_takes_it_for_no_stall() {
    let mut c = Cluster::start_configured(
        "ux-no-false-stall",
        false,
        "[retention]\nkeep_finished = \"1h\"\n",
    );
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--wait", "--", "true"]);
    // Two retention intervals: the pass that job 1's end made due ran about 5 s after the
    // server's first, so the one job 2's end asks for is 5 s after that, long gone by then.
    std::thread::sleep(Duration::from_secs(12));
    c.ok(&["submit", "--wait", "--", "true"]);
    std::thread::sleep(Duration::from_millis(500));
    let log = std::fs::read_to_string(c.dir.join("server.log")).expect("server log");
    assert!(!log.contains("the server did not listen"), "{log}");
}

/// A server stopped by SIGTERM says so in its log, and that it stopped, as its agents do: it
/// exited without a word, so an operator reading the log after a restart could not tell a clean
/// stop from a crash.
#[test]
fn a_server_stopped_by_sigterm_says_so_in_its_log() {
    let mut c = Cluster::start("ux-server-term", false);
    assert_eq!(c.stop_server("TERM", Duration::from_secs(20)), Some(0));
    let log = std::fs::read_to_string(c.dir.join("server.log")).expect("server log");
    assert!(
        log.contains("SIGTERM: stopping: no new calls; the state stays in"),
        "{log}"
    );
    assert!(log.contains("server stopped"), "{log}");
}

/// A SIGTERM sent as soon as the server has written its address (a supervisor's quick stop, a
/// test harness) stops it cleanly: the handler was registered only after the start, so such a
/// signal killed the server with nothing in its log.
#[test]
fn a_server_sent_sigterm_as_soon_as_its_address_is_written_stops_cleanly() {
    for i in 0..20 {
        let mut c = Cluster::start(&format!("ux-early-term-{i}"), false);
        assert_eq!(
            c.stop_server("TERM", Duration::from_secs(20)),
            Some(0),
            "start {i}"
        );
    }
}

/// A SIGHUP (log rotation's `postrotate`, a `systemctl reload`, a closed terminal) does not end
/// the server: it ended it at once, its log saying nothing, as a crash does.
#[test]
fn a_server_sent_sighup_goes_on_and_its_log_says_why() {
    let mut c = Cluster::start("ux-server-hup", false);
    c.signal_server("HUP");
    crate::support::wait_until(
        "the server's log of the SIGHUP",
        Duration::from_secs(20),
        || {
            std::fs::read_to_string(c.dir.join("server.log"))
                .is_ok_and(|log| log.contains("SIGHUP: ignored"))
        },
    );
    c.ok(&["jobs"]);
    assert_eq!(c.stop_server("TERM", Duration::from_secs(20)), Some(0));
}

/// A script tells "the server is not there" (69, sysexits' EX_UNAVAILABLE: try again later)
/// and "the token was refused" (77, EX_NOPERM: fix the credentials) from a failed job or a
/// refused request (1): every failure exited 1, so a cron job's `hetsched wait` could not tell
/// a job that failed from a server being restarted.
#[test]
fn an_unreachable_server_and_a_refused_token_have_exit_statuses_of_their_own() {
    let c = Cluster::start("ux-exit-status", false);
    let wrong = c.write("wrong-token", "0123456789abcdef\n");
    let mut cmd = c.command(&["jobs"]);
    cmd.env("HETSCHED_TOKEN_FILE", &wrong);
    let out = cmd.output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "{err}");
    assert!(err.contains("the server refused the token"), "{err}");
    // Nothing listens there (a port of this host that was just free).
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let url = format!("http://{free}");
    let out = c.cli(&["jobs", "--server", &url]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("is the server running?"), "{err}");
    // A submission retries first, then says the same.
    let out = c.cli(&["submit", "--server", &url, "--", "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(err.contains("gave up after"), "{err}");
    // Bad input stays 1.
    let out = c.cli(&["job", "99"]);
    assert_eq!(out.status.code(), Some(1));
}

/// `hetsched wait` started while the server is down — a restart between a script's `submit`
/// and its `wait last` — waits for the server as `submit` does (saying it retries), then for the
/// job; with no server coming back it gives up once `HETSCHED_SUBMIT_RETRY_FOR` (5 s in these
/// tests) has passed, with 69 and the server's address. It exited 69 at once, failing the script.
#[test]
fn a_wait_started_while_the_server_is_down_rides_out_the_restart() {
    let mut c = Cluster::start("ux-wait-server-down", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "3"]);
    c.kill_server();
    // Tries at 0, 0.2, 0.6, 1.4 and 3 s would end the harness's 5 s: more, so that a slow
    // restart on a loaded machine still falls within them.
    let waiting = c
        .command(&["wait", "last"])
        .env("HETSCHED_SUBMIT_RETRY_FOR", "30s")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run hetsched wait");
    std::thread::sleep(Duration::from_secs(2));
    c.start_server();
    let out = waiting.wait_with_output().expect("wait ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("retrying in") && err.contains("is the server running?"),
        "{err}"
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("job 1 completed: 1 succeeded"), "{said}");

    // A server that does not come back: the wait gives up within the retry time, at its last
    // try that fits (3 s), naming the server.
    c.kill_server();
    let started = std::time::Instant::now();
    let out = c.cli(&["wait", "1"]);
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("error: gave up after ")
            && err.contains(" s (HETSCHED_SUBMIT_RETRY_FOR: 5s): nothing answers at ")
            && err.contains(&c.url()),
        "{err}"
    );
    assert!(
        (Duration::from_millis(2500)..Duration::from_secs(15)).contains(&took),
        "{took:?}: {err}"
    );
}

/// `--log-format json --log-file F`: the server's own log goes to F (not to standard error),
/// one JSON object a line, and F is private (0600). logrotate renames F and sends SIGHUP: the
/// renamed file keeps the lines before, and the server opens a new F for the lines after. An
/// agent reads the same settings from its configuration file (`log_format`, `log_file`). A
/// format that is none is refused naming the flag and the formats taken.
#[test]
fn a_server_logs_json_lines_to_a_private_file_that_sighup_reopens() {
    use std::os::unix::fs::PermissionsExt;
    let mut c = Cluster::stopped("ux-log-file");
    let logs = c.dir.join("logs");
    std::fs::create_dir(&logs).expect("log dir");
    let file = logs.join("server.json");
    c.server_args = vec![
        "--log-format".into(),
        "json".into(),
        "--log-file".into(),
        file.to_str().expect("path").into(),
    ];
    c.start_server();
    let read = |path: &std::path::Path| std::fs::read_to_string(path).unwrap_or_default();
    wait_until("the server's first line", Duration::from_secs(20), || {
        read(&file).contains("server listening")
    });
    let mode = std::fs::metadata(&file)
        .expect("log file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let messages = |path: &std::path::Path| -> Vec<String> {
        read(path)
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                assert!(v["timestamp"].is_string() && v["level"].is_string(), "{v}");
                v["fields"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    assert!(
        messages(&file).iter().any(|m| m == "server listening"),
        "{}",
        read(&file)
    );
    // Nothing of it on standard error.
    let stderr = read(&c.dir.join("server.log"));
    assert!(!stderr.contains("server listening"), "{stderr}");

    let rotated = logs.join("server.json.1");
    std::fs::rename(&file, &rotated).expect("rotate");
    c.signal_server("HUP");
    wait_until("a new log file", Duration::from_secs(20), || {
        read(&file).contains("SIGHUP: reopened the log file")
    });
    let mode = std::fs::metadata(&file)
        .expect("new log file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    c.ok(&["jobs"]);
    assert_eq!(c.stop_server("TERM", Duration::from_secs(20)), Some(0));
    let after = messages(&file);
    assert!(after.iter().any(|m| m == "server stopped"), "{after:?}");
    assert!(!after.iter().any(|m| m == "server listening"), "{after:?}");
    let before = messages(&rotated);
    assert!(before.iter().any(|m| m == "server listening"), "{before:?}");
    assert!(
        !before
            .iter()
            .any(|m| m.starts_with("SIGHUP") || m == "server stopped"),
        "{before:?}"
    );

    // An agent's configuration file says the same.
    c.start_server();
    let agent_file = logs.join("agent.json");
    c.start_agent_with_config(
        "a",
        &format!(
            "cores = 1\nlog_format = \"json\"\nlog_file = \"{}\"\n",
            agent_file.display()
        ),
    );
    wait_until("the agent's first line", Duration::from_secs(20), || {
        read(&agent_file).contains("agent starting")
    });
    assert!(
        messages(&agent_file).iter().any(|m| m == "agent starting"),
        "{}",
        read(&agent_file)
    );

    let out = std::process::Command::new(crate::support::BIN)
        .args(["server", "--log-format", "xml"])
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'xml' for '--log-format") && err.contains("text, json"),
        "{err}"
    );
}

/// A server that speaks another protocol exits 76 (sysexits' EX_PROTOCOL), saying what to check:
/// `http://` to a TLS server, `https://` to a plain one (the address's scheme), and a call the
/// server does not offer (an older server, or no hetsched server at that address: the versions,
/// the address). Each exited 1, as a refused request does; and neither is retried by `submit`,
/// as waiting mends neither.
#[test]
fn a_tls_mismatch_and_a_call_the_server_lacks_exit_76() {
    use crate::support::tls_file;
    let tls = Cluster::start_tls("ux-exit-protocol-tls");
    let plain_url = format!("http://{}", tls.listen);
    // The server drops the connection or answers with a TLS alert, at random: a few tries.
    for _ in 0..3 {
        let out = tls
            .command(&["jobs", "--server", &plain_url])
            .env_remove("HETSCHED_CA")
            .output()
            .expect("run hetsched");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(76), "{err}");
        assert!(
            err.contains(&format!(
                "the server at {plain_url} speaks TLS: use an https:// URL with --ca"
            )),
            "{err}"
        );
    }
    let out = tls
        .command(&["submit", "--server", &plain_url, "--", "true"])
        .env_remove("HETSCHED_CA")
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(
        err.contains("speaks TLS") && !err.contains("retrying"),
        "{err}"
    );
    // A certificate the CA given does not vouch for: said at once, not retried.
    for command in [&["jobs"][..], &["submit", "--", "true"][..]] {
        let out = tls
            .command(command)
            .env("HETSCHED_CA", tls_file("server.pem"))
            .output()
            .expect("run hetsched");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(76), "{command:?}: {err}");
        assert!(
            err.contains(
                "the server's certificate is refused: it is not signed by the CA given with --ca"
            ) && !err.contains("retrying"),
            "{command:?}: {err}"
        );
    }

    let mut c = Cluster::start("ux-exit-protocol", false);
    let tls_url = format!("https://{}", c.listen);
    let ca = tls_file("ca.pem");
    for command in ["jobs", "submit"] {
        let mut args = vec![
            command,
            "--server",
            &tls_url,
            "--ca",
            ca.to_str().expect("path"),
        ];
        if command == "submit" {
            args.extend(["--", "true"]);
        }
        let out = c.cli(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(76), "{command}: {err}");
        assert!(
            err.contains("the server does not speak TLS; use an http:// URL")
                && !err.contains("retrying"),
            "{command}: {err}"
        );
    }
    // An agent's log listener speaks gRPC, but not the client service.
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let log = c.agent_log("a");
    let port = log
        .split("serving task outputs to the server addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.rsplit(':').next())
        .expect("the agent's log port")
        .to_string();
    let out = c
        .command(&["jobs"])
        .env("HETSCHED_SERVER", format!("127.0.0.1:{port}"))
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(
        err.contains("the server does not offer this call")
            && err.contains("as new as this client"),
        "{err}"
    );
}

/// `hetsched agent --server URL` (with `extra` flags) on cluster `c`'s agent token, waited for
/// up to 30 s: its exit status and standard error. An agent still retrying then fails the test.
fn agent_against(c: &Cluster, name: &str, url: &str, extra: &[&str]) -> (Option<i32>, String) {
    let err_path = c.dir.join(format!("agent-{name}.err"));
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let mut child = std::process::Command::new(crate::support::BIN)
        .args(["agent", "--server", url, "--name", name, "--cores", "1"])
        .arg("--token-file")
        .arg(c.data().join("agent-token"))
        .arg("--work-dir")
        .arg(c.dir.join(format!("agent-{name}")))
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn agent");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s.code();
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the agent against {url} still runs after 30 s: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status,
        std::fs::read_to_string(&err_path).unwrap_or_default(),
    )
}

/// An agent given the wrong scheme for its server, or a server without agent registration,
/// exits 76 at start saying what to change, as the client commands do: it retried for ever (a
/// TLS server reached over `http://`, said with exit status 1 at best), and a mismatch never
/// mends.
#[test]
fn an_agent_facing_a_tls_mismatch_or_no_registration_exits_76() {
    use crate::support::tls_file;
    let tls = Cluster::start_tls("ux-agent-76-tls");
    let plain_url = format!("http://{}", tls.listen);
    let (status, err) = agent_against(&tls, "a", &plain_url, &["--log-listen", "127.0.0.1:0"]);
    assert_eq!(status, Some(76), "{err}");
    assert!(
        err.contains(&format!(
            "the server at {plain_url} speaks TLS: use an https:// URL with --ca"
        )),
        "{err}"
    );

    let mut c = Cluster::start("ux-agent-76", false);
    let tls_url = format!("https://{}", c.listen);
    let ca = tls_file("ca.pem");
    let ca = ca.to_str().expect("path");
    // With a log listener the agent first asks the server to certify it; without, it registers.
    for listen in ["127.0.0.1:0", "none"] {
        let (status, err) = agent_against(&c, "b", &tls_url, &["--ca", ca, "--log-listen", listen]);
        assert_eq!(status, Some(76), "{listen}: {err}");
        assert!(
            err.contains(&format!(
                "connecting to {tls_url}: the server does not speak TLS; use an http:// URL (without --ca)"
            )),
            "{listen}: {err}"
        );
    }

    // An agent's log listener speaks gRPC, but registers no agents (as an older server lacks a
    // call).
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let log = c.agent_log("a");
    let port = log
        .split("serving task outputs to the server addr=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.rsplit(':').next())
        .expect("the agent's log port")
        .to_string();
    let listener_url = format!("http://127.0.0.1:{port}");
    let (status, err) = agent_against(&c, "c", &listener_url, &["--log-listen", "none"]);
    assert_eq!(status, Some(76), "{err}");
    assert!(
        err.contains(&format!(
            "the server at {listener_url} does not offer agent registration"
        )) && err.contains(&format!(
            "as new as this agent (hetsched {};",
            env!("CARGO_PKG_VERSION")
        )),
        "{err}"
    );
}

/// A SIGHUP does not end an agent either: it ended it at once, and the tasks it ran were killed
/// by its guard and run again elsewhere (as slurmd does, it goes on).
#[test]
fn an_agent_sent_sighup_goes_on_with_its_task() {
    let mut c = Cluster::start("ux-agent-hup", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "30"]);
    crate::support::wait_until("the task to run", Duration::from_secs(20), || {
        c.json(&["job", "1"])["counts"]["running"] == 1
    });
    c.signal_agent("a", "HUP");
    crate::support::wait_until(
        "the agent's log of the SIGHUP",
        Duration::from_secs(20),
        || c.agent_log("a").contains("SIGHUP: ignored"),
    );
    std::thread::sleep(Duration::from_millis(500));
    let agent = c.agents.get_mut("a").expect("agent a");
    assert!(
        agent.try_wait().expect("try_wait").is_none(),
        "the agent exited"
    );
    let job = c.json(&["job", "1"]);
    assert_eq!(job["counts"]["running"], 1, "{job}");
    let tasks = c.tasks(1);
    assert_eq!(tasks[0]["attempt"], 1, "{tasks:?}");
}

/// `log` names a one-task job's one id, and a cancelled task's state once. `tasks --node` with
/// a name no node has is refused naming the nodes there are, not answered "no tasks match".
#[test]
fn log_names_a_one_task_jobs_id_and_tasks_checks_its_node() {
    let mut c = Cluster::start("ux-jobs-apps", false);
    c.ok(&["submit", "--name", "one", "--", "true"]);
    // A one-task job's ids are one id, not a range `0–0`; a task cancelled before it ran says
    // so once (not `cancelled: cancelled`).
    let out = c.cli(&["log", "1", "7"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("job 1 has no task 7: its one task's id is 0"),
        "{err}"
    );
    // A job that never was: where the ids are.
    let out = c.cli(&["cancel", "999"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no job 999 (`hetsched jobs` lists the jobs there are)"),
        "{err}"
    );
    c.ok(&["submit", "--name", "two", "--", "true"]);
    c.ok(&["cancel", "2"]);
    let out = c.cli(&["log", "2", "true:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("never ran (it is cancelled)") && !err.contains("cancelled: cancelled"),
        "{err}"
    );
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let out = c.cli(&["tasks", "--job", "1", "--node", "a9"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("a9") && err.contains("`a`"), "{err}");
    c.ok(&["tasks", "--job", "1", "--node", "a"]);
}

/// `wait --timeout` that runs out exits 124, as `timeout(1)` does, and names the jobs still
/// unfinished, so that a script tells "still running" from a failed job (1); a failure among the
/// jobs waited for wins over the time-out; a completed job exits 0.
#[test]
fn a_wait_that_times_out_exits_124_naming_the_unfinished_jobs_unlike_a_failure() {
    let mut c = Cluster::start("ux-wait-timeout", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&["submit", "--", "sleep", "60"]);
    wait_until("the task to run", Duration::from_secs(10), || {
        c.json(&["job", "1"])["counts"]["running"] == 1
    });
    let out = c.cli(&["wait", "1", "--timeout", "300ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(
        err.contains("timed out after 300ms: job 1 still running"),
        "{err}"
    );
    c.ok(&["submit", "--", "false"]);
    let out = c.cli(&["wait", "2"]);
    assert_eq!(out.status.code(), Some(1));
    // One failed, one still running: the failure is what the status says.
    let out = c.cli(&["wait", "1,2", "--timeout", "300ms"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("2 failed") && err.contains("job 1 still running"),
        "{err}"
    );
    c.ok(&["submit", "--", "true"]);
    let out = c.cli(&["wait", "3", "--timeout", "30s"]);
    assert_eq!(out.status.code(), Some(0));
    c.ok(&["cancel", "1"]);
}

/// Ctrl-C on `submit --wait` (or SIGTERM on `wait`) stops the waiting, not the job: the job keeps
/// running, and the user is told so with the command that stops it; the exit status is the
/// shell's for the signal (130, 143).
#[test]
fn an_interrupted_wait_leaves_the_job_running_and_says_how_to_cancel_it() {
    let mut c = Cluster::start("ux-wait-interrupted", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    for (args, signal, status) in [
        (&["submit", "--wait", "--", "sleep", "60"][..], "INT", 130),
        (&["wait", "1"][..], "TERM", 143),
    ] {
        let child = c
            .command(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        // (`submit --wait` may not have submitted yet: no job 1.)
        wait_until("the task to run", Duration::from_secs(10), || {
            let out = c.cli(&["job", "1", "--output", "json"]);
            out.status.success()
                && serde_json::from_slice::<serde_json::Value>(&out.stdout)
                    .is_ok_and(|j| j["counts"]["running"] == 1)
        });
        // The waiting has begun (the submission was answered before the task ran).
        std::thread::sleep(Duration::from_millis(500));
        let ok = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .expect("kill");
        assert!(ok.success());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
        assert!(
            err.contains("job 1 keeps running: `hetsched cancel 1` stops it"),
            "{err}"
        );
        assert_eq!(c.json(&["job", "1"])["state"], "running");
    }
    c.ok(&["cancel", "1"]);
}

/// An agent whose registration the server refuses (here: a name it does not take) exits with
/// that refusal as its only error: no loop speaking for the node (divisible chunks, stream
/// workers) runs before the registration and warns first of a refusal that reads as the cause.
/// `--cores 0` or too many are refused by the agent itself, naming the flag.
#[test]
fn an_agent_refused_at_registration_says_only_why() {
    let c = Cluster::start("ux-agent-refused", false);
    let agent = |name: &str, cores: &str| {
        let mut child = std::process::Command::new(crate::support::BIN)
            .args([
                "agent",
                "--server",
                &c.url(),
                "--name",
                name,
                "--cores",
                cores,
            ])
            .arg("--token-file")
            .arg(c.data().join("agent-token"))
            .arg("--work-dir")
            .arg(c.data().join("../agent-z"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn agent");
        let start = std::time::Instant::now();
        while child.try_wait().expect("try_wait").is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("the refused agent did not exit");
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let out = child.wait_with_output().expect("output");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The server's rule for a node name, checked by the agent itself before it makes any
    // path of the name (the server refused it at registration before).
    let (status, err) = agent("bad!name", "2");
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains("error: --name: node name `bad!name` may hold only letters"),
        "{err}"
    );
    assert!(!err.contains("chunk ask"), "{err}");
    for cores in ["0", "100000"] {
        let (status, err) = agent("z", cores);
        assert_eq!(status, Some(2), "{err}");
        assert!(
            err.contains("--cores") && err.contains("an agent offers 1 to 65536"),
            "{err}"
        );
    }
}

/// `node drain`, `node resume` and `node stop` of one node answer in JSON with its `name`, as each entry of
/// several nodes has it, and say what was done: `drained` as the node now stands, and
/// `was_drained` before. Resuming a node that was not drained says so rather than "resumed".
#[test]
fn node_drain_and_resume_json_name_the_node_and_say_what_was_done() {
    let mut c = Cluster::start("ux-drain-json", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    let said = c.ok(&["node", "resume", "a"]);
    assert!(
        said.contains("node `a` was not drained") && !said.contains("resumed"),
        "{said}"
    );
    let v = c.json(&["node", "resume", "a"]);
    assert_eq!(
        (&v["name"], &v["drained"], &v["was_drained"]),
        (&"a".into(), &false.into(), &false.into()),
        "{v}"
    );
    let v = c.json(&["node", "drain", "a"]);
    assert_eq!(
        (&v["name"], &v["drained"], &v["was_drained"]),
        (&"a".into(), &true.into(), &false.into()),
        "{v}"
    );
    // The keys scripts read stay.
    assert_eq!(v["running"], 0, "{v}");
    let v = c.json(&["node", "resume", "a"]);
    assert_eq!(
        (&v["name"], &v["drained"], &v["was_drained"]),
        (&"a".into(), &false.into(), &true.into()),
        "{v}"
    );
    let v = c.json(&["node", "drain", "a,a"]);
    assert_eq!(
        (&v[0]["name"], &v[0]["drained"], &v[1]["was_drained"]),
        (&"a".into(), &true.into(), &true.into()),
        "{v}"
    );
    let said = c.ok(&["node", "resume", "a"]);
    assert!(said.contains("node `a` resumed"), "{said}");
    // `node stop` of one node names it too.
    let v = c.json(&["node", "stop", "a"]);
    assert_eq!(v["name"], "a", "{v}");
}

/// `log` of a task whose node's agent has left (SIGTERM), or whose node was declared dead
/// (SIGKILL), says so and where the output stays, instead of a transport error.
#[test]
fn log_from_a_node_whose_agent_left_or_died_says_so() {
    let mut c = Cluster::start("ux-log-left", false);
    c.start_agent("a", 1, &[]);
    c.start_agent("b", 1, &[]);
    c.wait_for_nodes(2);
    c.ok(&["submit", "--requires", "node:a", "--", "echo", "hello"]);
    c.ok(&["submit", "--requires", "node:b", "--", "echo", "hello"]);
    c.ok(&["wait", "1,2"]);
    c.signal_agent("a", "TERM");
    assert_eq!(c.agent_exit("a", Duration::from_secs(30)), Some(0));
    c.kill_agent("b");
    wait_until("a left and b dead", Duration::from_secs(20), || {
        let nodes = c.json(&["nodes", "--all"]);
        nodes
            .as_array()
            .is_some_and(|n| n.len() == 2 && n.iter().all(|n| n["alive"] == false))
    });
    for (job, node, why) in [
        ("1", "a", "its agent left (signal)"),
        ("2", "b", "it was declared dead"),
    ] {
        let task = &c.tasks(job.parse().expect("a job id"))[0];
        let app = task["app"].as_str().expect("its application");
        let out = c.cli(&["log", job, &format!("{app}:0")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!(
                "node `{node}` cannot be asked for the task's output: {why}"
            )) && err.contains(&format!("in {node}:"))
                && err.contains(&format!("job-{job}/{app}-0.1.{{out,err}}"))
                && !err.contains("transport error"),
            "{err}"
        );
    }
    // After a restart the node that left is still said to have left (the server had said it
    // had not heartbeated since the start, as of a node that may yet come back).
    c.kill_server();
    c.start_server();
    let out = c.cli(&["log", "1", "echo:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(
                "node `a` cannot be asked for the task's output: its agent left (signal)"
            ),
        "{err}"
    );
}

/// `server --listen localhost:7420` is refused naming the flag, with the forms it takes (it
/// said only `invalid socket address syntax`); so are an agent's `--log-listen` and the
/// configuration files' `listen` and `log_listen`, at their line.
#[test]
fn a_listen_address_with_a_host_name_is_refused_with_the_forms_taken() {
    let c = Cluster::start("ux-listen-name", false);
    let token = c.data().join("agent-token");
    let token = token.to_str().expect("a UTF-8 path");
    let work = crate::support::temp_dir("ux-listen-name-agent");
    let work = work.to_str().expect("a UTF-8 path");
    let url = c.url();
    for (args, flag) in [
        (
            &["server", "--listen", "localhost:7420", "--data-dir", work][..],
            "--listen",
        ),
        (
            &[
                "agent",
                "--server",
                &url,
                "--token-file",
                token,
                "--cores",
                "1",
                "--work-dir",
                work,
                "--log-listen",
                "localhost:0",
            ],
            "--log-listen",
        ),
    ] {
        let out = c.cli(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(flag)
                && err.contains("localhost:")
                && err.contains("give an IP address and port (127.0.0.1:")
                && err.contains("for this host only, 0.0.0.0:"),
            "{args:?}: {err}"
        );
    }
    let server_config = c.write("server.toml", "listen = \"localhost:7420\"\n");
    let agent_config = c.write("agent.toml", "cores = 1\nlog_listen = \"localhost:0\"\n");
    for (args, line) in [
        (
            vec![
                "server",
                "--config",
                server_config.to_str().expect("a UTF-8 path"),
                "--data-dir",
                work,
            ],
            "server.toml:1:",
        ),
        (
            vec![
                "agent",
                "--server",
                &url,
                "--token-file",
                token,
                "--work-dir",
                work,
                "--config",
                agent_config.to_str().expect("a UTF-8 path"),
            ],
            "agent.toml:2:",
        ),
    ] {
        let out = c.cli(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(line)
                && err.contains("`localhost:")
                && err.contains("give an IP address and port (127.0.0.1:"),
            "{args:?}: {err}"
        );
    }
}

/// `submit` of a file with both `[[application]]` and `[[task]]` says a file is one or the
/// other, at its line (it said `unknown field `application``, as if a key were mistyped).
#[test]
fn a_job_file_with_applications_and_tasks_is_refused_as_both_kinds() {
    let c = Cluster::start("ux-both-kinds", false);
    let file = c.write(
        "both.toml",
        "[[task]]\nname = \"t\"\ninstances = 1\ncommand = \"true\"\n\
         [[application]]\nname = \"a\"\ncommand = \"true\"\n",
    );
    let out = c.cli(&["submit", file.to_str().expect("a UTF-8 path")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(
            "both.toml:5:1: a file is either a batch job ([[application]] tables) or a \
                      workflow ([[task]] tables), not both"
        ) && !err.contains("unknown field"),
        "{err}"
    );
}

/// A server's timing given by flag and out of bounds is refused naming the flag, not the
/// configuration field a user never wrote (`dead_timeout`).
#[test]
fn a_timing_flag_out_of_bounds_is_refused_naming_the_flag() {
    let c = Cluster::start("ux-timing-flags", false);
    let data = crate::support::temp_dir("ux-timing-flags-server");
    let data = data.to_str().expect("a UTF-8 path");
    let server = |extra: &[&str]| {
        let mut args = vec!["server", "--listen", "127.0.0.1:0", "--data-dir", data];
        args.extend_from_slice(extra);
        let out = c.cli(&args);
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = server(&["--dead-timeout", "0s"]);
    assert!(
        err.contains("--dead-timeout (0s) must be at least"),
        "{err}"
    );
    let err = server(&["--heartbeat-interval", "20s", "--dead-timeout", "10s"]);
    assert!(
        err.contains("--heartbeat-interval (20s) must be below --dead-timeout (10s)"),
        "{err}"
    );
    // Only what came by flag: the other is the configuration's default, named as its field.
    let err = server(&["--heartbeat-interval", "1h"]);
    assert!(
        err.contains("--heartbeat-interval (1h) must be below dead_timeout"),
        "{err}"
    );
}

/// `hetsched jobs` shows every unfinished job and the 20 newest finished ones, saying how many
/// older ones it leaves out, as HyperQueue's `job list` and Slurm's `squeue` keep running work
/// in view; `--all`, a `--state`, and `--output json` list every job.
#[test]
fn jobs_shows_the_unfinished_and_the_newest_finished_unless_asked_for_all() {
    let c = Cluster::start("ux-jobs-all", false);
    // No agent: job 1 stays pending, jobs 2–23 are cancelled (finished).
    for _ in 0..23 {
        c.ok(&["submit", "--", "true"]);
    }
    c.ok(&["cancel", "2-23"]);
    let ids = |table: &str| -> Vec<u64> {
        table
            .lines()
            .filter_map(|l| l.strip_prefix('│'))
            .filter_map(|l| l.split('┆').next()?.trim().parse().ok())
            .collect()
    };
    let shown = c.ok(&["jobs"]);
    let mut expected = vec![1];
    expected.extend(4..=23);
    assert_eq!(ids(&shown), expected, "{shown}");
    assert!(
        shown.contains("2 older finished jobs not shown (`hetsched jobs --all` lists every job"),
        "{shown}"
    );
    let every = c.ok(&["jobs", "--all"]);
    assert_eq!(ids(&every), (1..=23).collect::<Vec<_>>(), "{every}");
    assert!(!every.contains("not shown"), "{every}");
    let cancelled = c.ok(&["jobs", "--state", "cancelled"]);
    assert_eq!(ids(&cancelled).len(), 22, "{cancelled}");
    assert_eq!(c.json(&["jobs"]).as_array().map(Vec::len), Some(23));
}

/// Every job's JSON says its kind (`batch`, `divisible`, `workflow`), as `submit` does: a script
/// reading `jobs` or `job N` had to guess it from `balancer` or `divisible`. The `jobs` table
/// has a `kind` column.
#[test]
fn jobs_and_job_json_say_each_jobs_kind() {
    let c = Cluster::start("ux-job-kind", false);
    c.ok(&["submit", "--", "true"]);
    let divisible = c.write(
        "d.toml",
        "[[divisible]]\nname = \"d\"\nunits = 10\ncommand = \"echo {start} {end}\"\n",
    );
    c.ok(&["submit", divisible.to_str().expect("utf-8")]);
    let workflow = c.write(
        "w.toml",
        "[[task]]\nname = \"t\"\ninstances = 1\ncost = \"1s\"\ncommand = \"true\"\n",
    );
    c.ok(&["submit", workflow.to_str().expect("utf-8")]);
    let listed = c.json(&["jobs"]);
    let kinds: Vec<&str> = listed
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["batch", "divisible", "workflow"], "{listed}");
    for (i, kind) in ["batch", "divisible", "workflow"].iter().enumerate() {
        let id = listed[i]["id"].as_u64().expect("id").to_string();
        assert_eq!(c.json(&["job", &id])["kind"], *kind);
    }
    // The table says it too, in a `kind` column beside the name: a user listing mixed kinds
    // could not tell a workflow's row from a batch job's.
    let table = c.ok(&["jobs"]);
    let rows: Vec<Vec<String>> = table
        .lines()
        .filter_map(|l| l.strip_prefix('│')?.strip_suffix('│'))
        .map(|l| l.split('┆').map(|cell| cell.trim().to_string()).collect())
        .collect();
    let header = rows.first().expect("a header row");
    assert_eq!(
        header[..4],
        ["job", "name", "kind", "state"].map(String::from),
        "{table}"
    );
    let shown: Vec<&str> = rows[1..].iter().map(|r| r[2].as_str()).collect();
    assert_eq!(shown, ["batch", "divisible", "workflow"], "{table}");
}

/// A user's range that covers another user's job says so: bob's `cancel 1-3`, job 1 being
/// alice's, skips it as not his — before, the note said the server listed no job 1, which
/// bob's `hetsched jobs` showed as alice's. A range holding none of bob's jobs is refused
/// saying the same; an id the server does not list at all is still named as such. Nothing
/// more is told than the listings show everyone.
#[test]
fn a_range_skips_another_users_job_saying_it_is_not_the_callers() {
    let c = Cluster::start("ux-range-others", false);
    let (alice, bob) = (c.add_user("alice"), c.add_user("bob"));
    // No agent: the jobs stay pending. 1 alice's, 2 and 3 bob's, 4 alice's, 5 purged.
    for token in [&alice, &bob, &bob, &alice, &bob] {
        c.ok_as(token, None, &["submit", "--", "true"]);
    }
    c.ok(&["cancel", "5"]);
    c.ok(&["purge", "5"]);
    let out = c
        .command(&["cancel", "1-6"])
        .env("HETSCHED_TOKEN_FILE", &bob)
        .output()
        .expect("run hetsched");
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert_eq!(said, "job 2: 1 task cancelled\njob 3: 1 task cancelled\n");
    assert!(
        err.contains(
            "note: `1-6`: jobs 1, 4 are not yours, and the server lists no job 5-6 (skipped)"
        ),
        "{err}"
    );
    assert!(!err.contains("lists no job 1"), "{err}");
    let out = c
        .command(&["cancel", "4-4"])
        .env("HETSCHED_TOKEN_FILE", &bob)
        .output()
        .expect("run hetsched");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("`4-4`: the server lists no job of yours in this range (job 4 is not yours)"),
        "{err}"
    );
    assert_eq!(
        out.status.code(),
        Some(77),
        "another user's jobs only: {err}"
    );
    assert_eq!(
        c.json(&["job", "4"])["state"],
        "pending",
        "alice's job is untouched"
    );
    // A name only another user's jobs have is refused as not bob's, as `cancel 4` by id is
    // (exit 77), not as a name the server lists no job of (bob's `jobs` lists it).
    c.ok_as(
        &alice,
        None,
        &["submit", "--name", "alicejob", "--", "true"],
    );
    let as_bob = |args: &[&str]| {
        let out = c
            .command(args)
            .env("HETSCHED_TOKEN_FILE", &bob)
            .output()
            .expect("run hetsched");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, err) = as_bob(&["cancel", "name:alicejob"]);
    assert_eq!(status, Some(77), "{err}");
    assert!(
        err.contains(
            "`name:alicejob`: the server lists no job of yours named `alicejob` (job 6 is not yours)"
        ),
        "{err}"
    );
    let (status, _) = as_bob(&["cancel", "4"]);
    assert_eq!(status, Some(77));
    // Read paths name alice's job by its name as by its id: `job` and `tasks` show it to bob,
    // `log` is refused as hers (exit 77), never as a name the server does not know.
    let out = c
        .command(&["job", "name:alicejob", "--output", "json"])
        .env("HETSCHED_TOKEN_FILE", &bob)
        .output()
        .expect("run hetsched");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("job JSON");
    assert_eq!(shown["id"], 6, "{shown}");
    let (status, err) = as_bob(&["tasks", "--job", "name:alicejob"]);
    assert_eq!(status, Some(0), "{err}");
    let (status, err) = as_bob(&["log", "name:alicejob", "0"]);
    assert_eq!(status, Some(77), "{err}");
    assert!(!err.contains("no job named"), "{err}");
    // A dependency by name picks among bob's own jobs only, and says how to name hers.
    let (status, err) = as_bob(&["submit", "--after", "name:alicejob", "--", "true"]);
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains(
            "`name:alicejob`: the server lists no job of yours named `alicejob` (job 6 is not \
             yours: name another user's job by its id to wait for it)"
        ),
        "{err}"
    );
    let (status, err) = as_bob(&["cancel", "name:nosuch"]);
    assert_eq!(status, Some(1), "{err}");
    assert!(
        err.contains("`name:nosuch`: the server lists no job named `nosuch`"),
        "{err}"
    );
    // Bob's `all` with only alice's jobs unfinished: none of his, and not none at all.
    let (status, err) = as_bob(&["cancel", "all"]);
    assert_eq!(status, Some(0), "{err}");
    assert!(
        err.contains(
            "no unfinished job of yours: nothing cancelled (other users have 3 unfinished jobs, not yours)"
        ),
        "{err}"
    );
    assert_eq!(c.json(&["job", "6"])["state"], "pending");
}

/// `cancel` of a range names the ids in it the server does not list (`cancel 1-2` with no job
/// 2): before, the range cancelled job 1 and said nothing of 2, so a mistyped range looked
/// done. A list of ids names its missing one as a refusal (exit status 1), after cancelling
/// the rest; JSON carries both.
#[test]
fn cancel_names_the_ids_of_a_range_or_list_the_server_does_not_list() {
    let c = Cluster::start("ux-cancel-missing", false);
    // No agent: jobs 1, 2 and 4 stay pending; 3 is purged, so the server lists no job 3.
    for _ in 0..4 {
        c.ok(&["submit", "--", "true"]);
    }
    c.ok(&["cancel", "3"]);
    c.ok(&["purge", "3"]);
    let out = c.cli(&["cancel", "1-3"]);
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert_eq!(said, "job 1: 1 task cancelled\njob 2: 1 task cancelled\n");
    assert!(
        err.contains("note: `1-3`: the server lists no job 3 (skipped)"),
        "{err}"
    );
    // Several gaps, and the ids past the newest job, each named once, as ranges.
    let out = c.cli(&["cancel", "3-9", "--output", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("note: `3-9`: the server lists no job 3, 5-9 (skipped)"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v,
        serde_json::json!([{"job_id": 4, "cancelled": 1, "kind": "batch"}]),
        "{v}"
    );
    // None of a range listed: refused, naming the range.
    c.refused(
        &["cancel", "7-9"],
        "`7-9`: the server lists no job in this range",
    );
    // A list: the listed jobs are told, the missing one refused by name, and the status fails.
    c.ok(&["submit", "--", "true"]);
    let out = c.cli(&["cancel", "5,3", "--output", "json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no job 3") && err.contains("1 of 2 jobs not cancelled: 3"),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["job_id"], 5, "{v}");
    assert_eq!(v[0]["cancelled"], 1, "{v}");
    assert_eq!(v[1]["job_id"], 3, "{v}");
    assert!(
        v[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no job 3")),
        "{v}"
    );
}

/// `bench-dispatch --agents` is documented in its help with its bounds, and an out-of-range
/// count is refused before anything starts, naming the flag: before, `--agents 0` started a
/// server, submitted the job and waited 600 s for agents that never came.
#[test]
fn bench_dispatch_documents_and_bounds_its_agents() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hetsched"))
            .args(args)
            .output()
            .expect("hetsched runs")
    };
    let help = run(&["bench-dispatch", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--agents <N>") && help.contains("1 to 64"),
        "{help}"
    );
    for (args, says) in [
        (&["--agents", "0"][..], "--agents must be 1 to 64, got 0"),
        (&["--agents", "65"][..], "--agents must be 1 to 64, got 65"),
        (&["--slots", "0"][..], "--slots must be 1 to 1024, got 0"),
        (
            &["--tasks", "0"][..],
            "--tasks must be 1 to 10000000, got 0",
        ),
    ] {
        let mut full = vec!["bench-dispatch"];
        full.extend_from_slice(args);
        let asked = std::time::Instant::now();
        let out = run(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "{args:?}: refused only after {:?}",
            asked.elapsed()
        );
    }
}

/// An application name that a job lacks is refused with the names it has: a `--shell` job's
/// application is named after the line's program (`echo`), not `sh`, which a user guesses
/// first; `log` and `cancel --app` say so as `update --app` does.
#[test]
fn an_unknown_application_is_refused_with_the_names_the_job_has() {
    let mut c = Cluster::start("ux-app-names", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    c.ok(&[
        "submit",
        "--tasks",
        "2",
        "--shell",
        "--wait",
        "--",
        "echo hi {index}",
    ]);
    assert_eq!(c.ok(&["log", "1", "echo:1"]), "hi 1\n");
    c.refused(
        &["log", "1", "sh:0"],
        "job 1 has no application `sh` (it has: echo)",
    );
    // A one-application job answers to its `--name` too, as its user names it.
    c.ok(&[
        "submit",
        "--tasks",
        "2",
        "--name",
        "sweep",
        "--shell",
        "--wait",
        "--",
        "echo sw {index}",
    ]);
    assert_eq!(c.ok(&["log", "name:sweep", "sweep:1"]), "sw 1\n");
    assert_eq!(c.ok(&["log", "name:sweep", "echo:0"]), "sw 0\n");
    c.ok(&[
        "submit", "--tasks", "2", "--app", "long", "--", "sleep", "30",
    ]);
    c.refused(
        &["cancel", "3", "--tasks", "0", "--app", "sleep"],
        "job 3 has no application `sleep` (it has: long)",
    );
    c.ok(&["cancel", "3"]);
}

/// After a server restart, a job submitted to the idle cluster starts at once, as before the
/// restart, although a node stored from before (the larger one) has not come back yet: its
/// wake-up goes to a node whose agent the server has heard from, not to the one it only
/// restored, and the job does not wait for the idle agent's next heartbeat (a minute by default;
/// the stored node is declared dead after the restart grace without waking anyone).
#[test]
fn a_job_submitted_after_a_server_restart_starts_without_waiting_for_an_idle_beat() {
    let mut c = Cluster::start("ux-restart-wake", false);
    c.start_agent("a", 2, &[]);
    c.start_agent("big", 4, &[]);
    c.wait_for_nodes(2);
    c.ok(&["submit", "--wait", "--", "true"]);
    c.stop_server("TERM", Duration::from_secs(20));
    c.kill_agent("big");
    c.start_server();
    // Agent `a` meets the restarted server within its retry pause and stays idle; `big` is
    // restored, not heard from, until its restart grace runs out.
    std::thread::sleep(Duration::from_secs(2));
    let started = std::time::Instant::now();
    let out = c.cli(&["submit", "--wait", "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the job waited {:?} for the idle agent",
        started.elapsed()
    );
}

/// A token file that cannot be read is a mistake here, not a server that is away: `submit`
/// says so once and exits at once, instead of retrying it five times over three seconds with a
/// warning each time as it does for a server that does not answer.
#[test]
fn a_submission_without_a_readable_token_fails_at_once_without_retries() {
    let dir = ScratchDir::new("op", "no-token");
    let missing = dir.join("no-such-token");
    let started = std::time::Instant::now();
    let out = std::process::Command::new(crate::support::BIN)
        .args(["submit", "--server", "http://127.0.0.1:1", "--token-file"])
        .arg(&missing)
        .args(["--", "true"])
        .output()
        .expect("run hetsched");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("reading the token from") && !said.contains("retrying"),
        "{said}"
    );
    assert_eq!(said.matches("error:").count(), 1, "{said}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// An agent without its token says where an agent's token comes from (the server's
/// `agent-token`, `--token-file`, `HETSCHED_AGENT_TOKEN_FILE`), not the client's
/// `~/.config/hetsched/token`, which no agent reads.
#[test]
fn an_agent_without_its_token_names_where_an_agents_token_comes_from() {
    let dir = crate::support::temp_dir("no-agent-token");
    let out = std::process::Command::new(crate::support::BIN)
        .args([
            "agent",
            "--server",
            "http://127.0.0.1:1",
            "--name",
            "x",
            "--token-file",
        ])
        .arg(dir.join("no-such-token"))
        .arg("--work-dir")
        .arg(dir.join("work"))
        .env_remove("HETSCHED_AGENT_TOKEN_FILE")
        .output()
        .expect("run hetsched");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("reading the agent token from")
            && said.contains("DATA_DIR/agent-token")
            && said.contains("HETSCHED_AGENT_TOKEN_FILE")
            && !said.contains(".config/hetsched/token"),
        "{said}"
    );
}

/// For `hetsched agent`, a configuration file's `server` and `token_file` win over
/// `HETSCHED_SERVER` and `HETSCHED_AGENT_TOKEN_FILE` (flag > file > environment > default):
/// the environment a login shell sets for client commands silently pointed an agent started
/// there away from the server its file names. Without the key in the file, the environment
/// still counts.
#[test]
fn an_agents_file_wins_over_the_environment_which_still_fills_what_the_file_leaves_out() {
    let dir = crate::support::temp_dir("agent-env");
    let agent = |config: &str| {
        let path = dir.join("agent.toml");
        std::fs::write(&path, config).expect("write");
        let out = std::process::Command::new(crate::support::BIN)
            .args(["agent", "--name", "x", "--config"])
            .arg(&path)
            .arg("--work-dir")
            .arg(dir.join("work"))
            // Each a value that, if read, would be the one the error names.
            .env("HETSCHED_SERVER", "http://127.0.0.1:88888")
            .env("HETSCHED_AGENT_TOKEN_FILE", dir.join("env-token"))
            .env_remove("HETSCHED_CA")
            .output()
            .expect("run hetsched");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let file_token = dir.join("file-token");
    let said = agent(&format!(
        "server = \"http://127.0.0.1:99999\"\ntoken_file = \"{}\"\n",
        file_token.display()
    ));
    assert!(
        said.contains(&format!(
            "reading the agent token from {}",
            file_token.display()
        )),
        "the file's token_file: {said}"
    );
    std::fs::write(&file_token, "t\n").expect("token");
    let said = agent(&format!(
        "server = \"http://127.0.0.1:99999\"\ntoken_file = \"{}\"\n",
        file_token.display()
    ));
    assert!(
        said.contains("`server`") && said.contains("99999") && !said.contains("88888"),
        "the file's server: {said}"
    );
    // Left out of the file: the environment's.
    let said = agent(&format!("token_file = \"{}\"\n", file_token.display()));
    assert!(
        said.contains("HETSCHED_SERVER") && said.contains("88888"),
        "the environment's server: {said}"
    );
}

/// An agent's name is checked before any path is made of it: `x/../../escaped` made
/// directories outside the default work directory's parent before the server refused it.
#[test]
fn an_agent_name_that_is_no_node_name_is_refused_before_any_directory_is_made() {
    let dir = crate::support::temp_dir("agent-name");
    let state = dir.join("xdg");
    std::fs::create_dir_all(&state).expect("dir");
    let token = dir.join("token");
    std::fs::write(&token, "t0k3n").expect("token");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("mode");
    let out = std::process::Command::new(crate::support::BIN)
        .args([
            "agent",
            "--server",
            "http://127.0.0.1:1",
            "--name",
            "x/../../../escaped",
        ])
        .arg("--token-file")
        .arg(&token)
        .env("XDG_STATE_HOME", &state)
        .output()
        .expect("run hetsched");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && said.contains("--name: node name `x/../../../escaped` may hold only letters"),
        "{said}"
    );
    assert!(!dir.join("escaped").exists(), "no directory outside");
    assert!(!state.join("hetsched").exists(), "nor inside");
}

/// A bound a configuration file's value breaks, found once the file has parsed, names the file
/// (it said only `invalid server configuration: …`) and the line and column of the key (it
/// named no line), and an empty `data_dir` is refused as such (it read `: cannot be created`).
#[test]
fn a_configuration_bound_names_the_file_and_an_empty_data_dir_is_refused() {
    let dir = crate::support::temp_dir("config-bound");
    for (text, says) in [
        ("max_attempts = 0\n", "1:1: max_attempts must be at least 1"),
        ("data_dir = \"\"\n", "1:1: data_dir must not be empty"),
        (
            "# a comment\nheartbeat_interval = \"20s\"\ndead_timeout = \"10s\"\n",
            "2:1: heartbeat_interval (20s) must be below dead_timeout (10s)",
        ),
        // The first key it names is a default: the one written is located.
        (
            "dead_timeout = \"400ms\"\n",
            "1:1: heartbeat_interval (500ms) must be below dead_timeout (400ms)",
        ),
        (
            "\nmax_connections = 1\n",
            "2:1: max_connections (1) must be from 16",
        ),
        (
            "[fair_share]\nhalf_life = \"10s\"\n",
            "2:1: fair_share.half_life",
        ),
    ] {
        let file = dir.join("server.toml");
        std::fs::write(&file, text).expect("config");
        let out = std::process::Command::new(crate::support::BIN)
            .args(["server", "--check", "--config"])
            .arg(&file)
            .output()
            .expect("run hetsched");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && said.contains(&format!(
                    "invalid server configuration: {}:{says}",
                    file.display()
                )),
            "{said}"
        );
    }
}

/// A log file that was there open to every user is said so at start (the log names users,
/// jobs and nodes); one the server creates is 0600 and nothing is said.
#[test]
fn a_log_file_open_to_every_user_is_warned_of() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::support::temp_dir("wide-log");
    let log = dir.join("server.log");
    std::fs::write(&log, "").expect("log");
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).expect("mode");
    let mut server = std::process::Command::new(crate::support::BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .arg("--log-file")
        .arg(&log)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("server");
    let mut first = String::new();
    let stderr = server.stderr.take().expect("stderr");
    std::io::BufReader::new(stderr)
        .read_line(&mut first)
        .expect("a line");
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        first.starts_with(&format!(
            "warning: --log-file {}: open to every user, or writable by its group (mode 644)",
            log.display()
        )),
        "{first}"
    );
}

/// What a script reading `--output json` relies on: standard output is whole JSON or nothing
/// on a refusal, a selection's `wait` tells every job (a refused one as an `error` entry), a
/// task's id comes as a string too, and `submit --wait` prints JSON Lines.
#[test]
fn scripts_get_whole_json_from_tasks_wait_and_submit_wait() {
    let mut c = Cluster::start("ux-json-scripts", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    // A refused listing leaves standard output empty (it held a lone `[`).
    for args in [
        &["tasks", "--job", "99", "--output", "json"][..],
        &["tasks", "--state", "bogus", "--output", "json"][..],
        &["tasks", "--node", "nosuch", "--output", "json"][..],
    ] {
        let out = c.cli(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // An unknown state is a usage error, as `jobs --state bogus` is: exit 2, clap's message
    // listing the states.
    for args in [
        &["tasks", "--state", "bogus"][..],
        &["tasks", "--state", "pending,bogus"][..],
        &["jobs", "--state", "bogus"][..],
    ] {
        let out = c.cli(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("invalid value 'bogus' for '--state <STATE>'")
                && err.contains("possible values: pending,"),
            "{args:?}: {err}"
        );
    }

    // `submit --wait`: the submission as one line at once, then the job as it ended.
    let out = c.cli(&["submit", "--wait", "--output", "json", "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line one JSON document"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["job_id"], 1, "{text}");
    assert_eq!(lines[1]["job_id"], 1, "{text}");
    assert_eq!(lines[1]["state"], "completed", "{text}");

    // Every task's id also as a string.
    let tasks = c.json(&["tasks", "--job", "1"]);
    assert_eq!(tasks[0]["id_text"], tasks[0]["id"].to_string(), "{tasks}");
    // An empty listing is an empty array.
    assert_eq!(
        c.json(&["tasks", "--state", "failed"]),
        serde_json::json!([])
    );

    // A selection's wait with a job that is not there: the others still told, that one an
    // `error` entry, and the command fails naming it.
    let out = c.cli(&["wait", "1,99", "--output", "json"]);
    assert!(!out.status.success());
    let waited: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one array");
    assert_eq!(waited[0]["job_id"], 1, "{waited}");
    assert_eq!(waited[0]["state"], "completed", "{waited}");
    assert_eq!(waited[1]["job_id"], 99, "{waited}");
    assert!(
        waited[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no job 99")),
        "{waited}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 of 2 jobs did not complete: 99 not waited for"),
        "{err}"
    );
    // One job alone: its object, with its `job_id`; so resubmit's reply.
    assert_eq!(c.json(&["wait", "1"])["job_id"], 1);
    let out = c.cli(&["submit", "--output", "json", "--", "false"]);
    assert!(out.status.success());
    assert!(!c.cli(&["wait", "2"]).status.success(), "job 2 failed");
    // Why, as a key: an exit status; a signal by its name, where there is no exit code.
    let failed = &c.json(&["tasks", "--job", "2"])[0];
    assert_eq!(
        (&failed["reason"], &failed["signal"], &failed["exit_code"]),
        (&"exited".into(), &serde_json::Value::Null, &1.into()),
        "{failed}"
    );
    c.ok(&["submit", "--", "sh", "-c", "kill -SEGV $$"]);
    assert!(!c.cli(&["wait", "3"]).status.success(), "job 3 failed");
    let crashed = &c.json(&["tasks", "--job", "3"])[0];
    assert_eq!(
        (
            &crashed["reason"],
            &crashed["signal"],
            &crashed["exit_code"]
        ),
        (&"signal".into(), &"SEGV".into(), &serde_json::Value::Null),
        "{crashed}"
    );
    let table = c.ok(&["tasks", "--job", "3"]);
    assert!(table.contains("failed (signal SEGV)"), "{table}");
    let again = c.json(&["resubmit", "2", "--failed"]);
    assert_eq!(
        (&again["job_id"], &again["tasks"]),
        (&2.into(), &1.into()),
        "{again}"
    );
    // An empty submission key (a script's unset `$KEY`) would be no key: refused.
    c.refused(
        &["submit", "--submission-key", "", "--", "true"],
        "a value is required for '--submission-key",
    );
}

/// `nodes --output json`: an idle agent holding its call open is heard from now in both
/// `last_seen_ms` (an age, 0) and `last_heard_ms` (a time, now): a script's `now -
/// last_heard_ms` must not see a live node as up to an idle heartbeat stale.
#[test]
fn an_idle_nodes_last_heard_time_agrees_with_its_last_seen_age() {
    let mut c = Cluster::start("ux-heard", false);
    c.start_agent("a", 1, &[]);
    c.wait_for_nodes(1);
    std::thread::sleep(Duration::from_secs(3));
    let nodes = c.json(&["nodes"]);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let n = &nodes[0];
    let seen = n["last_seen_ms"].as_u64().expect("last_seen_ms");
    let heard = n["last_heard_ms"].as_u64().expect("last_heard_ms");
    let age = now_ms.saturating_sub(heard);
    assert!(
        age <= seen + 1_500,
        "heard {age} ms ago by last_heard_ms, {seen} ms ago by last_seen_ms: {n}"
    );
}
