//! A workflow instance fetching its inputs, seen from the CLI, end to end with the real
//! `hetsched` binary on loopback: the consumer's agent caps its fetches (`fetch_bandwidth` in
//! its `agent.toml`), so a few MiB take seconds to cross instead of milliseconds, and the
//! listings can be watched while the instance fetches.

use crate::support;

use std::time::{Duration, Instant};
use support::Cluster;

/// The producer's output: 3 MiB.
const BLOB_BYTES: u64 = 3 << 20;

/// `make` (on the agent with `producer`) writes a 3 MiB output; `use` (on the agent with
/// `consumer`, whose `fetch_bandwidth` is 1 MiB/s) reads it, so its fetch takes at least 2.75 s.
/// While it fetches, `hetsched tasks` shows it `fetching` (JSON and table) and `hetsched job`
/// "(1 fetching)"; once its program runs (2 s), it shows `running`, then the workflow completes
/// and the instance's `fetch_ms` holds the time the fetch took. Before `fetch_bandwidth`, the fetch was
/// over before a listing could see it.
#[test]
fn an_instance_fetching_under_its_agents_fetch_bandwidth_shows_fetching_then_runs() {
    let mut c = Cluster::start_configured("wf-fetch-cap", false, "[workflow]\ncluster_size = 2\n");
    c.start_producer_and_capped_consumer();
    let job = c.submit_blob_workflow(BLOB_BYTES, " && sleep 2");
    let job_arg = job.to_string();
    let user_task = |tasks: &[serde_json::Value]| {
        tasks
            .iter()
            .find(|t| t["app"] == "use")
            .cloned()
            .unwrap_or_default()
    };
    // Seen fetching: the JSON listing, then the table and the job's summary while it still is
    // (the fetch lasts seconds; the listings take milliseconds).
    let start = Instant::now();
    loop {
        let t = user_task(&c.tasks(job));
        if t["fetching"] == true {
            assert_eq!(t["node"], "user", "{t}");
            assert_eq!(t["state"], "running", "{t}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "`use` never seen fetching: {t}\n{}",
            c.agent_log("user")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = c.ok(&["tasks", "--job", &job_arg]);
    let row = table
        .lines()
        .find(|l| l.contains(" use "))
        .unwrap_or_else(|| panic!("no `use` row:\n{table}"));
    assert!(row.contains("fetching"), "{table}");
    let summary = c.ok(&["job", &job_arg]);
    assert!(summary.contains("(1 fetching)"), "{summary}");
    // Then its program runs (2 s), no longer fetching, and the workflow completes.
    let start = Instant::now();
    loop {
        let t = user_task(&c.tasks(job));
        if t["fetching"] != true {
            assert_eq!(t["state"], "running", "seen running once fetched: {t}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "`use` still fetching: {t}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let done = crate::workflow_runtime::wait_done(&c, job, Duration::from_secs(20));
    assert_eq!(done["state"], "completed", "{done}");
    let t = user_task(&c.tasks(job));
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_ne!(t["fetching"], true, "{t}");
    let fetch_ms = t["fetch_ms"]
        .as_u64()
        .or_else(|| t["fetch_ms"].as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("no fetch_ms: {t}"));
    assert!(
        fetch_ms >= 2_500,
        "3 MiB under 1 MiB/s fetched in {fetch_ms} ms: {t}"
    );
    let table = c.ok(&["tasks", "--job", &job_arg]);
    assert!(!table.contains("fetching"), "{table}");
    // The table's `fetch` column says how long the inputs took, as `hetsched` writes durations.
    assert!(table.contains(" fetch "), "a fetch column:\n{table}");
    let row = table
        .lines()
        .find(|l| l.contains(" use "))
        .unwrap_or_else(|| panic!("no `use` row:\n{table}"));
    let took = format!(" {:.1}s ", Duration::from_millis(fetch_ms).as_secs_f64());
    assert!(row.contains(&took), "fetch time{took}in:\n{table}");
}
