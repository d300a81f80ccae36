//! Workflow views of the runtime commands (issue 13): a workflow's progress per task in
//! `hetsched job N` (instances waiting, ready, running, done, failed) and `hetsched nodes`'
//! workflow columns.

use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use hetsched_proto as pb;

/// Whether job `j` is a workflow (only workflows name a balancer).
pub fn is_workflow(j: &pb::JobInfo) -> bool {
    !j.balancer.is_empty()
}

/// Per task: waiting, ready, running, done, failed, cancelled.
pub fn progress(j: &pb::JobInfo) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "task",
        "instances",
        "waiting",
        "ready",
        "running",
        "done",
        "failed",
        "cancelled",
        "cpu time",
        "max rss",
    ]);
    for a in &j.apps {
        let c = a.counts.unwrap_or_default();
        t.add_row(super::human::row(vec![
            a.name.clone(),
            a.tasks.to_string(),
            c.pending.saturating_sub(a.ready).to_string(),
            a.ready.to_string(),
            super::human::running(&c),
            c.succeeded.to_string(),
            c.failed.to_string(),
            // Cancelled by a user, or not run because a producer failed or was cancelled: the
            // row then adds up to its instances.
            c.cancelled.to_string(),
            super::human::measured_cpu_time(a.cpu_ms, a.max_rss_bytes),
            super::human::memory(a.max_rss_bytes),
        ]));
    }
    t
}

/// Workflow instances, PCDDB thresholds and clusters, and balancing messages of each node.
pub fn nodes(reply: &pb::ListNodesReply) -> Option<Table> {
    if !reply
        .nodes
        .iter()
        .any(|n| n.instances > 0 || n.mt > 0 || n.balance_sent > 0)
    {
        return None;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "name",
        "instances",
        "LT",
        "MT",
        "clusters",
        "PCDDB sent",
        "received from agents",
    ]);
    // The server fills LT and MT only while a pcddb workflow runs.
    let threshold = |v: u32, n: &pb::NodeInfo| {
        if n.mt == 0 {
            "-".to_string()
        } else {
            v.to_string()
        }
    };
    for n in &reply.nodes {
        t.add_row(super::human::row(vec![
            n.name.clone(),
            n.instances.to_string(),
            threshold(n.lt, n),
            threshold(n.mt, n),
            if n.clusters.is_empty() {
                "-".into()
            } else {
                n.clusters.clone()
            },
            n.balance_sent.to_string(),
            n.balance_received.to_string(),
        ]));
    }
    Some(t)
}

/// `hetsched job N --graph`: the task graph, as DOT (`--output dot`), JSON, or a table of its
/// edges.
pub async fn graph(args: &super::ClientArgs, id: u64) -> anyhow::Result<()> {
    let reply = super::client::connect(args)
        .await?
        .workflow_graph(pb::GetJobRequest {
            job_id: id,
            ..Default::default()
        })
        .await
        .map_err(super::client::refused)?
        .into_inner();
    match args.output {
        super::Output::Dot => print!("{}", reply.dot),
        // The edges as the table lists them, beside the DOT text (a script need not parse it).
        super::Output::Json => super::client::json(&serde_json::json!({
            "dot": reply.dot,
            "edges": edges(&reply.dot)
                .into_iter()
                .map(|[producer, consumer, data]| serde_json::json!({
                    "producer": producer, "consumer": consumer, "data": data,
                }))
                .collect::<Vec<_>>(),
        }))?,
        super::Output::Table => {
            let mut t = Table::new();
            t.load_preset(UTF8_FULL_CONDENSED);
            t.set_header(["producer", "consumer", "data"]);
            for e in edges(&reply.dot) {
                t.add_row(super::human::row(e.to_vec()));
            }
            println!("{t}");
        }
    }
    Ok(())
}

/// The edges of the server's DOT text, as (producer, consumer, data and how it is waited for:
/// `m (all)`), from its lines `"P" -> "C" [label="…"]`.
fn edges(dot: &str) -> Vec<[&str; 3]> {
    dot.lines()
        .filter(|l| l.contains("->"))
        .filter_map(|line| {
            let q: Vec<&str> = line.split('"').collect();
            (q.len() >= 6).then(|| [q[1], q[3], q[5]])
        })
        .collect()
}

/// The agent's workflow settings from its configuration: `attributes`, `max_input_bytes`,
/// `min_free_disk`, `fetch_bandwidth` (the one bucket all the agent's fetches share), and `[tls]` (the certificate and key files are read now, so a missing file
/// stops the agent at start).
pub fn agent_data_options(
    config: &hetsched_agent::config::AgentConfig,
) -> anyhow::Result<hetsched_agent::dataflow::DataOptions> {
    hetsched_core::model::cluster::attribute_set(config.attributes.iter().map(String::as_str))
        .map_err(|(_, e)| anyhow::anyhow!("attributes: {e}"))?;
    let tls = match &config.tls {
        Some(t) => Some(super::serve::read_listener_tls(
            "tls.cert", &t.cert, "tls.key", &t.key,
        )?),
        None => None,
    };
    Ok(hetsched_agent::dataflow::DataOptions {
        attributes: config.attributes.clone(),
        tls,
        max_input_bytes: config.max_input_bytes(),
        min_free_disk: config.min_free_disk(),
        fetch_bandwidth: hetsched_agent::dataflow::FetchBandwidth::new(config.fetch_bandwidth()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_table_shows_no_thresholds_when_no_pcddb_workflow_runs() {
        let node = |name: &str, lt, mt| pb::NodeInfo {
            name: name.into(),
            lt,
            mt,
            balance_sent: 3,
            ..Default::default()
        };
        let reply = pb::ListNodesReply {
            nodes: vec![node("idle", 0, 0), node("busy", 4, 20)],
        };
        let text = nodes(&reply).map(|t| t.to_string()).unwrap_or_default();
        let row = |name: &str| -> Vec<String> {
            text.lines()
                .find(|l| l.contains(name))
                .map(|l| {
                    l.split(['│', '┆'])
                        .map(|c| c.trim().to_string())
                        .filter(|c| !c.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        assert_eq!(row("idle")[2..4], ["-", "-"], "{text}");
        assert_eq!(row("busy")[2..4], ["4", "20"], "{text}");
    }

    /// A task's row adds up to its instances: the cancelled ones (by a user, or not run because
    /// a producer failed) have a column.
    #[test]
    fn a_tasks_progress_row_adds_up_to_its_instances() {
        let j = pb::JobInfo {
            apps: vec![pb::AppInfo {
                name: "B".into(),
                tasks: 12,
                ready: 3,
                counts: Some(pb::TaskCounts {
                    pending: 5,
                    running: 1,
                    succeeded: 2,
                    cancelled: 4,
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = progress(&j).to_string();
        // The cells of the first line holding `marker`.
        let cells = |marker: &str| -> Vec<&str> {
            text.lines()
                .find(|l| l.contains(marker))
                .map(|l| {
                    l.split(['│', '┆'])
                        .map(str::trim)
                        .filter(|c| !c.is_empty())
                        .collect()
                })
                .unwrap_or_default()
        };
        let (header, row) = (cells("instances"), cells(" B "));
        assert_eq!(
            header[..8],
            [
                "task",
                "instances",
                "waiting",
                "ready",
                "running",
                "done",
                "failed",
                "cancelled"
            ],
            "{text}"
        );
        assert_eq!(
            row[..8],
            ["B", "12", "2", "3", "1", "2", "0", "4"],
            "{text}"
        );
    }
}
