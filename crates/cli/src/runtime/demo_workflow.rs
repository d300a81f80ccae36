//! The workflow part of `hetsched demo` (issue 13): a small task graph with fan-out and fan-in,
//! balanced agent to agent by PCDDB (spec 05). `split` writes four numbers; `square` (one
//! instance per number) reads its producer's output, fetched from the agent that produced it;
//! `sum` reads all four squares. The demo prints the per-task progress, where each instance
//! ran, the PCDDB figures of the nodes, and the sum against the expected value.

use super::Output;
use super::client::{Api, wait_on};
use hetsched_proto as pb;
use std::path::Path;

/// Instances of `split` and `square`.
const PARTS: i64 = 4;

/// The server configuration the demo's workflow wants: one proximity cluster of the three
/// agents (spec 05's ⌊0.3·3⌋ would make each agent a cluster of its own).
pub fn server_config() -> hetsched_server::config::WorkflowConfig {
    hetsched_server::config::WorkflowConfig {
        cluster_size: Some(3),
        ..Default::default()
    }
}

/// The expected sum: Σ (100·k)² for k = 1..=PARTS.
pub fn expected() -> i64 {
    (1..=PARTS).map(|k| (100 * k) * (100 * k)).sum()
}

/// The demo's workflow file; `sum` also writes its total to `total` (outside the agents).
pub fn file(total: &Path) -> String {
    format!(
        r#"# hetsched demo: a small task graph, balanced by PCDDB between the agents.
balancer = "pcddb"

[[task]]
name = "split"
instances = "1..={PARTS}"
cost = "1s"
outputs = ["part"]
command = "echo $(( {{index}} * 100 )) > {{output:part}}"

[[task]]
name = "square"
instances = "1..={PARTS}"
cost = "1s"
inputs = ["part"]
outputs = ["sq"]
command = "x=$(cat {{input:part}}); echo $(( x * x )) > {{output:sq}}"

[[task]]
name = "sum"
instances = 1
cost = "1s"
inputs = ["sq"]
outputs = ["total"]
command = "s=0; for f in {{input:sq}}; do s=$(( s + $(cat $f) )); done; echo $s > {{output:total}}; echo $s > {total}"
"#,
        total = total.display()
    )
}

/// Submits the workflow, waits for it, and prints what happened. Fails if the sum is wrong.
pub async fn demo(api: &mut Api, dir: &Path) -> anyhow::Result<()> {
    let total = dir.join("workflow-total");
    let text = file(&total);
    let path = dir.join("demo-workflow.toml");
    std::fs::write(&path, &text)?;
    let reply = api
        .submit(pb::SubmitRequest {
            origin: path.display().to_string(),
            text,
            workdir: dir.display().to_string(),
            name: "demo-workflow".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    println!(
        "submitted workflow {}: split ×{PARTS} → square ×{PARTS} → sum ×1 (balancer pcddb)",
        reply.job_id
    );
    let waited = wait_on(
        api,
        Output::Table,
        reply.job_id,
        Some(std::time::Duration::from_secs(120)),
        false,
    )
    .await;
    let job = api
        .get_job(pb::GetJobRequest {
            job_id: reply.job_id,
            ..Default::default()
        })
        .await?
        .into_inner();
    println!("{}", super::workflow::progress(&job));
    let tasks = api
        .list_tasks(pb::ListTasksRequest {
            job_id: reply.job_id,
            limit: 1000,
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    for t in &tasks {
        println!("  {}[{}] ran on {}", t.app, t.index, t.node);
    }
    let nodes = api
        .list_nodes(pb::ListNodesRequest::default())
        .await?
        .into_inner();
    if let Some(table) = super::workflow::nodes(&nodes) {
        println!("{table}");
    }
    println!(
        "launch node: {} messages sent, {} received",
        job.launch_sent, job.launch_received
    );
    waited?;
    let got =
        std::fs::read_to_string(&total).map_err(|e| anyhow::anyhow!("{}: {e}", total.display()))?;
    let got: i64 = got.trim().parse()?;
    println!(
        "workflow sum {got} (expected {}): {}",
        expected(),
        if got == expected() {
            "correct"
        } else {
            "WRONG"
        }
    );
    anyhow::ensure!(got == expected(), "the workflow's sum is wrong");
    Ok(())
}
