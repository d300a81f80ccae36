//! `hetsched sim graph` and `hetsched sim pcddb-paper`: workflows of component instances under the
//! static, centralised and PCDDB balancers (spec 05).
//!
//! The workflow file is also one `hetsched submit` takes: its `balancer` line and its tasks'
//! instance sizes are checked by the core's functions `submit` uses
//! ([`hetsched_core::input::workflow_runtime`]), so a file the runtime refuses is refused here
//! in the same words; `--balancer` wins over the file's line, which wins over pcddb.

use crate::input_file::read_input as read;
use crate::sim::Output;
use anyhow::bail;
use clap::Args;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::NodeId;
use hetsched_core::input::Duration;
use hetsched_core::input::cluster::{parse_cluster, parse_node_attributes};
use hetsched_core::input::latency::parse_latency;
use hetsched_core::input::workflow::parse_workflow;
use hetsched_core::input::workflow_runtime::{check_instances_fit, file_balancer, instance_sizes};
use hetsched_core::model::Resources;
use hetsched_core::model::latency::LatencyMatrix;
use hetsched_core::policy::graph::AttrMask;
use hetsched_core::policy::graph::catalogue::NodeCatalogue;
use hetsched_core::policy::graph::{BalancerKind, Thresholds};
use hetsched_core::time::{NANOS_PER_SEC, Time, to_secs};
use hetsched_sim::graph::{
    Execution, GraphResult, GraphSimConfig, MAX_GRAPH_NODES, simulate_graph,
};
use hetsched_sim::scenario::pcddb_paper;
use std::path::PathBuf;

/// Options of `sim graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// Cluster description (TOML); nodes may list `attributes` that tasks `require`. At most
    /// 100,000 nodes, which run about 0.15 s per simulated second under pcddb (release build,
    /// 2-core VM; 10,000 nodes 0.005 s).
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Workflow (TOML), e.g. examples/workflow-mm5.toml.
    #[arg(long, value_name = "FILE")]
    pub workflow: PathBuf,
    /// The balancer: static, centralised or pcddb. Without it, the workflow file's `balancer`
    /// line (centralised or pcddb, the one `hetsched submit` runs the file under), else pcddb:
    /// the flag wins over the file, the file over the default. A file's line the runtime would
    /// refuse is refused here too, flag or not.
    #[arg(long, value_name = "BALANCER")]
    pub balancer: Option<BalancerKind>,
    /// Underload threshold per core (pcddb): a node holding fewer than LT × cores instances asks
    /// for work; at least 1.
    #[arg(long, default_value_t = 2)]
    pub lt: u32,
    /// Moderate-load cap per core (pcddb): a node takes work up to MT × cores instances; at
    /// least LT.
    #[arg(long, default_value_t = 10)]
    pub mt: u32,
    /// The launch node (by name); the first node of the cluster file by default.
    #[arg(long, value_name = "NODE")]
    pub launch: Option<String>,
    /// Latency file (TOML); by default derived from the cluster's per-node `latency` and racks.
    #[arg(long, value_name = "FILE")]
    pub latency: Option<PathBuf>,
    /// Seed of instance costs and self-check phases.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Period of the nodes' self-checks (pcddb) and monitoring reports (centralised); at least
    /// 1ms.
    #[arg(long, default_value = "1s")]
    pub check_interval: Duration,
    /// Time a node needs to handle one incoming message, e.g. "2ms" (0: free, no bottleneck);
    /// at most 1h.
    #[arg(long, default_value = "0s")]
    pub message_cost: Duration,
    /// How a node runs what it holds: `queue` (each core one instance at a time, idle cores
    /// take a sibling's waiting ones) or `time-share` (all at once, the cores shared equally).
    #[arg(long, default_value = "queue")]
    pub execution: Execution,
    /// Write every instance, node peak and message counter as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    pub export: Option<PathBuf>,
    /// Print a table or JSON (a summary).
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Also write the summary (the JSON `--output json` prints) as `graph.json` into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Options of `sim pcddb-paper`.
#[derive(Debug, Args)]
pub struct PcddbPaperArgs {
    /// Seeds to repeat every run with (costs and self-check phases), comma-separated, each once.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub seeds: Vec<u64>,
    /// Also write the report into this directory (created if missing): `pcddb-paper.json`, a
    /// CSV per part and the paper's figures 5–8 and table 4 as SVG.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print tables or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// The shortest `--check-interval`: 1 ms, as `sim run`'s `--heartbeat`. Below it a run spends
/// its time on self-checks (1 ns is a billion events per node per simulated second: a one-second
/// workflow ran for minutes) and no agent checks itself that often.
const MIN_CHECK_INTERVAL: Time = 1_000_000;

/// The longest `--message-cost`: 1 hour. A node that takes longer to handle one message models
/// no balancer (the paper's sweep goes to 50 ms), and every message's handling time is added to
/// the simulated clock, which a cost of months ran past its end.
const MAX_MESSAGE_COST: Time = 3600 * NANOS_PER_SEC;

/// Runs `sim graph`.
pub fn graph_cmd(args: GraphArgs) -> anyhow::Result<()> {
    let mut inputs = vec![
        ("--cluster", args.cluster.as_path()),
        ("--workflow", args.workflow.as_path()),
    ];
    if let Some(latency) = &args.latency {
        inputs.push(("--latency", latency.as_path()));
    }
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "graph.json", &inputs)?;
    out.check_file("--export", args.export.as_deref(), &inputs)?;
    let cluster_origin = args.cluster.display().to_string();
    let cluster_text = read(&args.cluster)?;
    let cluster = parse_cluster(&cluster_origin, &cluster_text)?;
    let attributes = parse_node_attributes(&cluster_origin, &cluster_text)?;
    if cluster.nodes.len() > MAX_GRAPH_NODES {
        bail!(
            "{cluster_origin}: {} nodes; sim graph takes at most {MAX_GRAPH_NODES} (every node a \
             pcddb request passes keeps a copy of its underloaded-node table: a request through \
             every node of 100,000 holds 20 GB)",
            cluster.nodes.len()
        );
    }
    let workflow = parse_workflow(&args.workflow.display().to_string(), &read(&args.workflow)?)?;
    // What `hetsched submit` reads of the same file is checked as it checks it (one check, in
    // the core): a balancer it would refuse, an instance no node can hold.
    let file_balancer = file_balancer(&workflow)?;
    let sizes = instance_sizes(&workflow)?;
    let catalogue = NodeCatalogue::new(&cluster, &attributes)?;
    workflow.check_requirements(&catalogue.offered())?;
    let capacities: Vec<Resources> = cluster.nodes.iter().map(|n| n.capacity()).collect();
    // Among the nodes that offer the task's `requires` (a node the balancers never give it
    // cannot hold it); a task no node offers them all to is refused by the simulator.
    let wanted: Vec<Option<AttrMask>> = workflow
        .workflow
        .tasks
        .iter()
        .map(|t| catalogue.requirement_mask(&t.requires))
        .collect();
    check_instances_fit(&workflow, &sizes, &capacities, |t, n| {
        wanted.get(t).copied().flatten().is_some_and(|mask| {
            cluster
                .nodes
                .get(n)
                .is_some_and(|node| catalogue.mask(node.id) & mask == mask)
        })
    })?;
    for (spec, size) in workflow.specs.iter().zip(&sizes) {
        if let Some(warning) = unmodelled_size(spec.name.get_ref(), size) {
            eprintln!("warning: {warning}");
        }
    }
    let latency = match &args.latency {
        Some(p) => parse_latency(&p.display().to_string(), &read(p)?, &cluster)?,
        None => LatencyMatrix::from_cluster(&cluster),
    };
    let launch = match &args.launch {
        None => NodeId(0),
        Some(name) => match cluster.nodes.iter().find(|n| &n.name == name) {
            Some(n) => n.id,
            None => bail!(
                "--launch: unknown node `{name}`; the cluster's nodes are {}",
                node_list(&cluster)
            ),
        },
    };
    if args.check_interval.0 < MIN_CHECK_INTERVAL {
        bail!(
            "--check-interval must be at least 1ms (nodes check themselves every second by \
             default), got {} ns",
            args.check_interval.0
        );
    }
    if args.message_cost.0 > MAX_MESSAGE_COST {
        bail!(
            "--message-cost must be at most 1h (the paper's sweep goes to 50ms), got {} s",
            to_secs(args.message_cost.0)
        );
    }
    let thresholds = Thresholds {
        lt: args.lt,
        mt: args.mt,
    };
    if !thresholds.is_valid() {
        bail!("--lt {} --mt {}: need 1 ≤ LT ≤ MT", args.lt, args.mt);
    }
    let config = GraphSimConfig {
        // Flag, else file, else the flag's documented default (docs/results/graphs.md's runs
        // and the paper's scenario are pcddb's; the runtime's default is its server's).
        balancer: args
            .balancer
            .or(file_balancer)
            .unwrap_or(BalancerKind::Pcddb),
        thresholds,
        launch,
        members: None,
        check_interval: args.check_interval.0,
        seed: args.seed,
        message_cost: args.message_cost.0,
        execution: args.execution,
    };
    let result = simulate_graph(&cluster, &attributes, &latency, &workflow.workflow, &config)?;
    if let Some(path) = &args.export {
        crate::out_dir::write_text(path, &result.export_json()?)?;
    }
    // With the seed it ran with, which (with its files and flags) makes the run again.
    let mut v = summary(&result);
    v["seed"] = args.seed.into();
    let json = serde_json::to_string_pretty(&v)?;
    crate::sim::emit_json(args.output, &json, &out, || print_result(&result))
}

/// What `sim graph` says of a task whose instances hold more than the one core it runs each
/// instance on (`size`: `cores`, `memory`, `gpus` as the runtime books them), or `None` when
/// the simulator runs the task as the runtime would. The balancers (the core's, shared with the
/// runtime) count instances against LT, MT and cores, and the nodes run one instance per core:
/// an instance of several cores, or one that books memory or GPUs, is run as a one-core instance
/// that books nothing, so such a run predicts more instances at once than the runtime starts.
fn unmodelled_size(task: &str, size: &Resources) -> Option<String> {
    let mut asks = Vec::new();
    if size.cores > 1 {
        asks.push(format!("{} cores", size.cores));
    }
    if size.gpus > 0 {
        asks.push(hetsched_core::text::count(u64::from(size.gpus), "GPU"));
    }
    if size.memory_bytes > 0 {
        asks.push(format!(
            "{} of memory",
            bytesize::ByteSize(size.memory_bytes)
        ));
    }
    if asks.is_empty() {
        return None;
    }
    let asks = match asks.len() {
        1 => asks[0].clone(),
        n => format!("{} and {}", asks[..n - 1].join(", "), asks[n - 1]),
    };
    let books = if size.gpus > 0 || size.memory_bytes > 0 {
        " and books no memory or GPU"
    } else {
        ""
    };
    Some(format!(
        "sim graph: task `{task}` asks for {asks} per instance; the simulator runs each instance \
         on one core{books}, so a node may run more of them at once than the runtime would"
    ))
}

fn node_list(cluster: &hetsched_core::Cluster) -> String {
    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    if names.len() > 12 {
        format!(
            "{} … {}",
            names[..6].join(", "),
            names[names.len() - 3..].join(", ")
        )
    } else {
        names.join(", ")
    }
}

fn summary(r: &GraphResult) -> serde_json::Value {
    serde_json::json!({
        "balancer": r.balancer,
        "makespan": r.makespan_s(),
        // As `sim run`, `compare` and `accel` name it.
        "makespan_s": r.makespan_s(),
        "instances": r.instances.len(),
        "messages": {
            "total": r.messages.total,
            "by_kind": r.messages.by_kind,
            "launch_node": r.messages.launch_node,
        },
        "waits": r.waits(),
        "nodes": r.nodes.iter().map(|n| serde_json::json!({
            "name": n.name,
            "cores": n.cores,
            "instances": n.instances_per_core.iter().sum::<u32>(),
            "peak_instances": n.peak_instances,
            "busy": n.busy_per_core.iter().map(|&b| to_secs(b)).sum::<f64>(),
            // The same, named in seconds as the other keys of the simulators are: core-seconds,
            // the node's cores together (a node of 2 cores may be busy twice the makespan).
            "busy_s": n.busy_per_core.iter().map(|&b| to_secs(b)).sum::<f64>(),
            "busy_core_s": n.busy_per_core.iter().map(|&b| to_secs(b)).sum::<f64>(),
            // Of its cores' time over the run, as the table's `busy (% of makespan)` and
            // `sim divisible`'s `busy_fraction` say it.
            "busy_fraction": busy_fraction(n, r.makespan_s()),
            "sent": n.sent,
            "received": n.received,
        })).collect::<Vec<_>>(),
    })
}

/// The share of node `n`'s core time over a run of `makespan_s` that it was busy (0 for an
/// empty run).
fn busy_fraction(n: &hetsched_sim::graph::NodeOutcome, makespan_s: f64) -> f64 {
    let span = makespan_s * f64::from(n.cores);
    if span > 0.0 {
        n.busy_per_core.iter().map(|&b| to_secs(b)).sum::<f64>() / span
    } else {
        0.0
    }
}

fn print_result(r: &GraphResult) {
    println!(
        "balancer {}: makespan {:.1} s, {} instances, {} messages ({} at the launch node {})",
        r.balancer,
        r.makespan_s(),
        r.instances.len(),
        r.messages.total,
        r.messages.launch_node,
        r.nodes[r.launch.index()].name,
    );
    let kinds: Vec<String> = r
        .messages
        .by_kind
        .iter()
        .filter(|(_, c)| **c > 0)
        .map(|(k, c)| format!("{k} {c}"))
        .collect();
    println!("messages by kind: {}", kinds.join(", "));
    let w = r.waits();
    println!(
        "ready instances waited for a node {:.2} s on average (at most {:.2} s), then in its queue {:.2} s (at most {:.2} s)",
        w.for_node_mean_s, w.for_node_max_s, w.in_queue_mean_s, w.in_queue_max_s
    );
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "node",
        "cores",
        "speed",
        "instances",
        "per core",
        "peak held",
        "busy (% of makespan)",
        "messages in/out",
    ]);
    let span = r.makespan.max(1) as f64;
    for n in &r.nodes {
        let done: u32 = n.instances_per_core.iter().sum();
        let busy: u64 = n.busy_per_core.iter().sum();
        table.add_row([
            n.name.clone(),
            n.cores.to_string(),
            format!("{:.2}", n.core_speed),
            done.to_string(),
            format!("{:.1}", done as f64 / n.cores as f64),
            n.peak_instances.to_string(),
            format!("{:.0} %", busy as f64 / (span * n.cores as f64) * 100.0),
            format!("{}/{}", n.received, n.sent),
        ]);
    }
    println!("{table}");
}

/// Runs `sim pcddb-paper`.
pub fn pcddb_paper_cmd(args: PcddbPaperArgs) -> anyhow::Result<()> {
    if args.seeds.is_empty() {
        bail!("--seeds: give at least one seed");
    }
    let mut seen = std::collections::HashSet::new();
    for seed in &args.seeds {
        if !seen.insert(seed) {
            bail!("--seeds: seed {seed} is given twice (its runs would count twice in every mean)");
        }
    }
    if let Some(dir) = &args.out {
        crate::out_dir::prepare(dir)?;
    }
    let report = pcddb_paper::run(&args.seeds)?;
    crate::sim::emit_report(
        args.output,
        || report.render_table(),
        &report,
        args.out.as_deref(),
        |dir| report.write_outputs(dir),
    )
}
