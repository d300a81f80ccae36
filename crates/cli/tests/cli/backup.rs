//! `hetsched server backup` and `hetsched server restore`: a consistent copy of a running
//! server's store, and putting one back into a stopped server's data directory.

use crate::support::Cluster;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

fn job_names(c: &Cluster) -> Vec<String> {
    c.json(&["jobs"])
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_running_servers_store_is_backed_up_and_restored_into_its_stopped_data_directory() {
    let mut c = Cluster::start("backup", false);
    let data = c.data();
    let data_dir = data.to_str().expect("path").to_string();
    // No agent: the job stays pending, in the store.
    c.ok(&["submit", "--name", "before", "--", "true"]);
    let backup = c.dir.join("state-backup.db");
    let backup_s = backup.to_str().expect("path").to_string();
    // While the server runs (its WAL holds what it committed; copying the file would not do).
    let said = c.ok(&["server", "backup", "--data-dir", &data_dir, &backup_s]);
    assert!(said.contains("state-backup.db"), "{said}");
    // With the data directory's tokens and secrets, which a restore writes back.
    assert!(said.contains(" with token, agent-token, "), "{said}");
    let mode = std::fs::metadata(&backup)
        .expect("backup")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(
        mode, 0o600,
        "the backup holds jobs' commands and environments"
    );
    c.ok(&["submit", "--name", "after", "--", "true"]);

    // Never over a file: not an earlier backup, not the store or any file in the data directory.
    c.refused(
        &["server", "backup", "--data-dir", &data_dir, &backup_s],
        "already exists",
    );
    let store = data.join("state.db");
    c.refused(
        &[
            "server",
            "backup",
            "--data-dir",
            &data_dir,
            store.to_str().expect("path"),
        ],
        "already exists",
    );
    let inside = data.join("state.db-journal");
    c.refused(
        &[
            "server",
            "backup",
            "--data-dir",
            &data_dir,
            inside.to_str().expect("path"),
        ],
        "is in the data directory",
    );
    let nowhere = c.dir.join("nosuch");
    c.refused(
        &[
            "server",
            "backup",
            "--data-dir",
            nowhere.to_str().expect("path"),
            &c.dir.join("x.db").to_string_lossy(),
        ],
        "no store",
    );

    // A restore needs the server stopped: it takes the server's lock.
    c.refused(
        &["server", "restore", "--data-dir", &data_dir, &backup_s],
        "another hetsched server",
    );
    // What is not a hetsched store is refused, naming the file.
    let text = c.write("notes.txt", "not a database\n");
    c.refused(
        &[
            "server",
            "restore",
            "--data-dir",
            &data_dir,
            text.to_str().expect("path"),
        ],
        "notes.txt",
    );
    assert_eq!(job_names(&c), ["before", "after"]);

    assert_eq!(c.stop_server("TERM", Duration::from_secs(20)), Some(0));
    let said = c.ok(&["server", "restore", "--data-dir", &data_dir, &backup_s]);
    assert!(said.contains("before-restore-"), "{said}");
    assert!(said.contains(" and token, agent-token, "), "{said}");
    // The store it replaced is kept, whole (with its WAL), in the data directory.
    let kept: Vec<_> = std::fs::read_dir(&data)
        .expect("data dir")
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("before-restore-")
        })
        .collect();
    assert_eq!(kept.len(), 1);
    let kept_mode = kept[0].metadata().expect("kept").permissions().mode() & 0o777;
    assert_eq!(kept_mode, 0o700);
    assert!(kept[0].path().join("state.db").exists());
    let restored_mode = std::fs::metadata(&store)
        .expect("store")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(restored_mode, 0o600);
    assert!(
        !data.join("state.db-wal").exists(),
        "no stale WAL beside the restored store"
    );

    c.start_server();
    assert_eq!(
        job_names(&c),
        ["before"],
        "the state as it was at the backup"
    );
    // Ids go on from the backup's: the next job is 2 again.
    let id = c.ok(&["submit", "--name", "again", "--", "true"]);
    assert!(id.contains("job 2 "), "{id}");
}

/// `hetsched output ID` into `dir` (under the cluster's directory): the gathered output of
/// divisible job `id`.
fn gathered(c: &Cluster, id: &str, dir: &str) -> Vec<u8> {
    let to = c.dir.join(dir);
    c.ok(&["output", id, "-o", to.to_str().expect("path")]);
    std::fs::read(to.join(format!("job-{id}.out"))).expect("the gathered output")
}

/// One backup file restores the whole server: a divisible job's files (its input, its chunks'
/// outputs, its gathered output) travel in it, and a server started on a new, empty data
/// directory restored from it serves the job's output and its chunks' as before.
#[test]
fn a_divisible_jobs_files_travel_in_the_backup_to_a_server_on_a_new_data_directory() {
    let mut c = Cluster::start("backup-div", false);
    c.start_agent("a", 2, &[]);
    c.wait_for_nodes(1);
    let numbers: String = (0..100).map(|i| format!("{i:03}\n")).collect();
    std::fs::write(c.dir.join("numbers.txt"), numbers).expect("input");
    let file = c.write(
        "sum.toml",
        "[[divisible]]\nname = \"sum\"\nunits = 100\n\
         command = \"echo units {start}..{end} >&2; awk '{ s += $1 } END { print s }' {input}\"\n\
         input = \"numbers.txt\"\nunit_bytes = 4\n",
    );
    let id = c.json(&["submit", file.to_str().expect("path")])["job_id"]
        .as_u64()
        .expect("job id")
        .to_string();
    c.ok(&["wait", &id]);
    let before = gathered(&c, &id, "out-before");
    let sum: u64 = String::from_utf8_lossy(&before)
        .lines()
        .map(|l| l.trim().parse::<u64>().expect("a chunk's sum"))
        .sum();
    assert_eq!(sum, 4950);
    let chunk0 = c.ok(&["log", &id, "0"]);

    // Taken while the server runs.
    let backup = c.dir.join("whole.db");
    let said = c.ok(&[
        "server",
        "backup",
        "--data-dir",
        c.data().to_str().expect("path"),
        backup.to_str().expect("path"),
    ]);
    assert!(said.contains(" divisible-job files ("), "{said}");
    // The divisible job is one of the backup's jobs (batch jobs alone were counted: `0 jobs`).
    assert!(said.contains(" bytes, 1 jobs)"), "{said}");
    c.kill_agent("a");
    assert_eq!(c.stop_server("TERM", Duration::from_secs(20)), Some(0));

    // A new machine: a data directory that does not exist yet, nothing copied beside.
    let mut fresh = Cluster::stopped("backup-div-new");
    let fresh_data = fresh.data();
    assert!(!fresh_data.exists());
    let said = fresh.ok(&[
        "server",
        "restore",
        "--data-dir",
        fresh_data.to_str().expect("path"),
        backup.to_str().expect("path"),
    ]);
    assert!(said.contains(" divisible-job files ("), "{said}");
    assert!(said.contains(" (1 jobs)"), "{said}");
    fresh.start_server();
    assert_eq!(gathered(&fresh, &id, "out-after"), before);
    assert_eq!(fresh.ok(&["log", &id, "0"]), chunk0);
    // Written back private: users' data.
    let files = fresh_data.join("divisible").join(format!("job-{id}"));
    for path in [fresh_data.join("divisible"), files.clone()] {
        let mode = std::fs::metadata(&path).expect("dir").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", path.display());
    }
    let mode = std::fs::metadata(files.join("output"))
        .expect("output")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

/// Job ids repeat after a restore (the ids that followed the backup are handed out again),
/// while the agents keep what the jobs of before left in their work directories. A user's job
/// that got the id of another user's earlier job never reads that job's output: not its own
/// Users `dave` and `erin` and a backup of the store taken before either ran anything: the
/// ids a restore hands out again.
struct BeforeDave {
    /// Dave's token file.
    dave: PathBuf,
    /// Erin's token file.
    erin: PathBuf,
    data_dir: String,
    backup: String,
}

impl BeforeDave {
    fn take(c: &Cluster) -> BeforeDave {
        let dave = c.add_user("dave");
        let erin = c.add_user("erin");
        let data_dir = c.data().to_str().expect("path").to_string();
        let backup = c.dir.join("before-dave.db");
        let backup = backup.to_str().expect("path").to_string();
        c.ok(&["server", "backup", "--data-dir", &data_dir, &backup]);
        BeforeDave {
            dave,
            erin,
            data_dir,
            backup,
        }
    }

    /// Stops the server, restores the backup and starts the server again.
    fn restore(&self, c: &mut Cluster) {
        assert_eq!(c.stop_server("TERM", Duration::from_secs(20)), Some(0));
        c.ok(&[
            "server",
            "restore",
            "--data-dir",
            &self.data_dir,
            &self.backup,
        ]);
        c.start_server();
    }
}

/// earlier attempt's, which `log` looks for on every agent (the operator review's leak: erin's
/// job 1 attempt 1 printed dave's job 1's secret, left on another node). Dave's file stays on
/// the node, set aside only when a job of the id runs there.
#[test]
fn after_a_restore_a_job_never_reads_the_output_of_an_earlier_job_of_its_id() {
    let mut c = Cluster::start("leak", false);
    c.start_agent("n1", 1, &[]);
    c.start_agent("n2", 1, &[]);
    c.wait_for_nodes(2);
    let before = BeforeDave::take(&c);
    let (dave, erin) = (&before.dave, &before.erin);
    fn as_user_of(c: &Cluster, token: &std::path::Path, args: &[&str]) -> (bool, String, String) {
        let mut cmd = c.command(args);
        cmd.env("HETSCHED_TOKEN_FILE", token);
        let out = cmd.output().expect("run hetsched");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    let secret = "DAVE-SECRET-42";
    let (ok, said, err) = as_user_of(
        &c,
        dave,
        &[
            "submit",
            "--wait",
            "--requires",
            "node:n1",
            "--",
            "sh",
            "-c",
            "echo DAVE-SECRET-42",
        ],
    );
    assert!(ok && said.contains("job 1 "), "{said}{err}");
    // Dave reads his own output (the read names his job's nonce, which marks its directory).
    let (ok, said, err) = as_user_of(&c, dave, &["log", "1", "sh:0"]);
    assert!(ok && said == format!("{secret}\n"), "{said}{err}");
    let held = c.dir.join("agent-n1/job-1/sh-0.1.out");
    assert_eq!(
        std::fs::read_to_string(&held).expect("n1 holds it"),
        format!("{secret}\n")
    );

    before.restore(&mut c);
    // Erin's job gets id 1 again; it fails on n2 twice.
    let (ok, said, err) = as_user_of(
        &c,
        erin,
        &[
            "submit",
            "--wait",
            "--requires",
            "node:n2",
            "--retries",
            "1",
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
    );
    assert!(
        !ok && format!("{said}{err}").contains("job 1"),
        "{said}{err}"
    );
    let tasks = c.json(&["tasks", "--job", "1"]);
    assert_eq!(tasks[0]["attempt"], 2, "{tasks}");
    // Its attempt 1 is looked for on every agent: n1 holds `job-1/sh-0.1.out`, dave's.
    let (ok, said, err) = as_user_of(&c, erin, &["log", "1", "sh:0", "--attempt", "1"]);
    assert!(ok, "{err}");
    assert!(
        !said.contains(secret) && !err.contains(secret),
        "{said}{err}"
    );
    assert!(
        said.is_empty() && err.contains("no live agent holds its stdout"),
        "{said}{err}"
    );
    let (ok, said, err) = as_user_of(&c, erin, &["log", "1", "sh:0"]);
    assert!(
        ok && said.is_empty() && err.contains("printed nothing"),
        "{said}{err}"
    );
    // Kept on n1, where no job of this incarnation ran.
    assert_eq!(
        std::fs::read_to_string(&held).expect("kept"),
        format!("{secret}\n")
    );
}

/// After a restore the agents, still running, hold the task specs of the jobs before by key —
/// and keys are made of application ids, which repeat as job ids do. A spec carries its job's
/// nonce, and an agent runs an assignment only with a spec of the assignment's nonce: erin's
/// job 1 runs her command, never dave's old job 1's (which it ran before, as dave).
#[test]
fn after_a_restore_a_job_runs_its_own_command_not_a_kept_spec_of_its_id() {
    let mut c = Cluster::start("stale-spec", false);
    c.start_agent("n1", 1, &[]);
    c.wait_for_nodes(1);
    let before = BeforeDave::take(&c);
    let run = |c: &Cluster, token: &std::path::Path, line: &str| {
        c.ok_as(token, None, &["submit", "--wait", "--shell", "--", line]);
    };
    run(&c, &before.dave, "echo DAVE-RAN");
    assert_eq!(c.ok(&["log", "1", "echo:0"]), "DAVE-RAN\n");
    before.restore(&mut c);
    c.wait_for_nodes(1);
    run(&c, &before.erin, "echo ERIN-RAN");
    assert_eq!(c.json(&["job", "1"])["owner"], "erin");
    assert_eq!(c.ok(&["log", "1", "echo:0"]), "ERIN-RAN\n");
}

/// `server restore` of a plain copy of `state.db` (not a `server backup` file) restores the
/// jobs but no tokens or secrets: it says so, naming the files the first start will write anew
/// (it said nothing, and every agent was then refused).
#[test]
fn restoring_a_plain_copy_of_the_store_says_no_tokens_came_back() {
    let mut c = Cluster::start("raw-restore", false);
    c.ok(&["submit", "--", "true"]);
    let data = c.data();
    assert_eq!(
        c.stop_server("TERM", std::time::Duration::from_secs(20)),
        Some(0)
    );
    let copy = c.dir.join("raw.db");
    std::fs::copy(data.join("state.db"), &copy).expect("copy");
    let fresh = c.dir.join("fresh");
    let out = c.cli(&[
        "server",
        "restore",
        "--data-dir",
        fresh.to_str().expect("path"),
        copy.to_str().expect("path"),
    ]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("held no tokens or secrets")
            && said.contains("the first start writes new token, agent-token, "),
        "{said}"
    );
}
