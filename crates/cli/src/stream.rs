//! `hetsched stream …`: stream topologies (spec 04). `stream place` computes a placement the way a
//! stream engine's scheduler plug-in would call it: topology and cluster files in, one assignment
//! per executor out (a table, or JSON with `--output json`).

use crate::input_file::read_input as read;
use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::input::cluster::parse_cluster_with_slots;
use hetsched_core::input::topology::{MAX_TOPOLOGY_EXECUTORS, parse_topology, parse_traffic};
use hetsched_core::model::topology::ExecutorId;
use hetsched_core::policy::stream::one_phase::{OnePhase, Refine};
use hetsched_core::policy::stream::{
    LOAD_EPSILON, Placement, PlacementProblem, StreamNode, StreamPlacer, StreamPlacerKind,
    evaluate, stream_nodes,
};
use hetsched_core::text::{agree, count};
use std::path::PathBuf;

/// Stream topology commands.
#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Place a topology's executors on a cluster's nodes and worker processes.
    Place(PlaceArgs),
}

/// How the placement is printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A human-readable summary and table.
    #[default]
    Table,
    /// One JSON document on stdout.
    Json,
}

/// Options of `stream place`.
#[derive(Debug, Args)]
pub struct PlaceArgs {
    /// Topology (TOML), e.g. examples/topology-wordcount.toml.
    #[arg(long, value_name = "FILE")]
    pub topology: PathBuf,
    /// Cluster description (TOML), e.g. examples/cluster-streams-10.toml.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Placer: even, resource-aware, two-phase-traffic or one-phase.
    #[arg(long, value_name = "NAME")]
    pub placer: StreamPlacerKind,
    /// User-fixed worker count (even, two-phase-traffic), 1 to 100000 (the most executors a
    /// topology may have); one per node when absent, at most the cluster's slots. One-phase
    /// chooses its own, resource-aware uses one per node.
    #[arg(long, value_name = "K")]
    pub workers: Option<u32>,
    /// Measured traffic (CSV `from,to,tuples_per_s`, executors as `<component>#<index>`) to use
    /// instead of the declared rates; executor loads scale with it.
    #[arg(long, value_name = "FILE")]
    pub traffic: Option<PathBuf>,
    /// One-phase: the fraction of each node's CPU its self-tuning may fill (0 < x ≤ 1). Lower
    /// leaves headroom for rate surges at the price of more nodes and inter-node traffic
    /// (docs/results/streams.md, "Choosing the utilisation limit"). Default 0.9, a target the
    /// placer passes when the topology needs more; a value given is a cap: a placement past it
    /// is refused (exit 1), naming the nodes past it and the least the topology needs. Other
    /// placers ignore it, with a note.
    #[arg(long, value_name = "X")]
    pub max_utilisation: Option<f64>,
    /// One-phase: the refinement after best-schedule, local-search (default) or none (spec 04's
    /// algorithm alone). Other placers ignore it, with a note.
    #[arg(long, value_name = "NAME")]
    pub refine: Option<Refine>,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// Runs one stream command.
pub fn run(cmd: StreamCommand) -> anyhow::Result<()> {
    match cmd {
        StreamCommand::Place(args) => place(args),
    }
}

/// Checks a `--workers` count: at least 1, at most [`MAX_TOPOLOGY_EXECUTORS`] (more workers
/// than executors would stay empty; 4,000,000,000 of them reserved 64 GB).
pub(crate) fn check_workers(workers: Option<u32>) -> anyhow::Result<()> {
    match workers {
        Some(0) => bail!("--workers must be at least 1"),
        Some(k) if u64::from(k) > MAX_TOPOLOGY_EXECUTORS => bail!(
            "--workers must be at most {MAX_TOPOLOGY_EXECUTORS} (the most executors a topology \
             may have), got {k}"
        ),
        _ => Ok(()),
    }
}

/// Says on stderr that `--workers` is ignored by `placer` when it chooses its processes itself
/// (one-phase, resource-aware), so that a user who asked for K workers and sees fewer knows why;
/// `stream place` and `topology submit` alike. [`note_ignored_one_phase_flags`] does the same for
/// one-phase's own flags.
pub(crate) fn note_ignored_workers(workers: Option<u32>, placer: StreamPlacerKind) {
    if workers.is_some()
        && matches!(
            placer,
            StreamPlacerKind::OnePhase | StreamPlacerKind::ResourceAware
        )
    {
        eprintln!("note: --workers is ignored by {placer} (it chooses its processes itself)");
    }
}

/// Says on stderr which of one-phase's own flags (`--max-utilisation`, `--refine`) were given to
/// another placer, which ignores them: as `--workers` under one-phase, a flag that changes
/// nothing gets a note rather than silence.
pub(crate) fn note_ignored_one_phase_flags(
    placer: StreamPlacerKind,
    max_utilisation: Option<f64>,
    refine: Option<Refine>,
) {
    if placer == StreamPlacerKind::OnePhase {
        return;
    }
    if max_utilisation.is_some() {
        eprintln!(
            "note: --max-utilisation is ignored by {placer} (only one-phase fills nodes to a limit)"
        );
    }
    if refine.is_some() {
        eprintln!("note: --refine is ignored by {placer} (only one-phase refines its placement)");
    }
}

/// Why `placement` does not keep the topology's load on every node within `cap` of the node's
/// available CPU (`--max-utilisation`), if it does not: the nodes past it (the first few, with
/// how far), and the least utilisation any placement on these nodes needs — the topology's
/// load over the CPU of the nodes it may use, or its largest executor over the largest node,
/// whichever is more (a bound: a packing may need more, bin packing being NP-hard).
fn past_cap(cap: f64, problem: &PlacementProblem<'_>, placement: &Placement) -> Option<String> {
    let nodes = problem.nodes;
    let loads = placement.node_loads(nodes.len(), &problem.loads);
    let percent = |x: f64| format!("{:.1} %", x * 100.0);
    let over: Vec<String> = nodes
        .iter()
        .zip(&loads)
        .filter(|&(n, &load)| load > 0.0 && load > cap * n.available() + LOAD_EPSILON)
        .map(|(n, &load)| {
            let used = load / n.available();
            format!(
                "{} at {} ({:.1} points over)",
                n.name,
                percent(used),
                (used - cap) * 100.0
            )
        })
        .collect();
    if over.is_empty() {
        return None;
    }
    const SHOWN: usize = 5;
    let mut listed = over[..over.len().min(SHOWN)].join(", ");
    if over.len() > SHOWN {
        listed.push_str(&format!(" and {} more", over.len() - SHOWN));
    }
    let usable: Vec<&StreamNode> = nodes
        .iter()
        .filter(|n| n.slots > 0 && n.available() > 0.0)
        .collect();
    let offered: f64 = usable.iter().map(|n| n.available()).sum();
    let largest_node = usable.iter().map(|n| n.available()).fold(0.0, f64::max);
    let demand: f64 = problem.loads.iter().sum();
    let largest_executor = problem.loads.iter().copied().fold(0.0, f64::max);
    let (spread, single) = (demand / offered, largest_executor / largest_node);
    let need = spread.max(single);
    let why = if single > spread {
        format!(
            "its largest executor ({:.1} % of a core) is {} of the largest node",
            largest_executor,
            percent(single)
        )
    } else {
        format!(
            "its load of {:.1} % of a core over the {:.0} % that {} offer",
            demand,
            offered,
            count(usable.len() as u64, "usable node")
        )
    };
    // The least flag value that is not below the bound, to three decimals as the flag is read.
    let least = (need * 1000.0).ceil() / 1000.0;
    let advice = if need > cap + LOAD_EPSILON {
        format!(
            "no placement on these nodes keeps within it: the topology needs at least {} ({why}); \
             give --max-utilisation {least} or more, or more nodes",
            percent(need)
        )
    } else {
        format!(
            "the topology needs at least {} ({why}), but one-phase's packing found no placement \
             within the limit; give a higher --max-utilisation or more nodes",
            percent(need)
        )
    };
    Some(format!(
        "--max-utilisation {cap}: one-phase's placement puts more than {} of their CPU on {}: \
         {listed}; {advice}",
        percent(cap),
        count(over.len() as u64, "node")
    ))
}

fn place(args: PlaceArgs) -> anyhow::Result<()> {
    check_workers(args.workers)?;
    let topo_origin = args.topology.display().to_string();
    let topology = parse_topology(&topo_origin, &read(&args.topology)?)?;
    let cluster_origin = args.cluster.display().to_string();
    let (cluster, slots) = parse_cluster_with_slots(&cluster_origin, &read(&args.cluster)?)?;
    if !cluster
        .nodes
        .iter()
        .any(|n| n.has_attributes(&topology.requires))
    {
        bail!(
            "{topo_origin}: requires {}, and no node of {cluster_origin} has them all",
            topology.requires.join(" + ")
        );
    }
    let nodes = stream_nodes(&cluster, &slots, &topology.requires);
    let mut problem = match &args.traffic {
        Some(path) => {
            let origin = path.display().to_string();
            let traffic = parse_traffic(&origin, &read(path)?, &topology)?;
            PlacementProblem::measured(&topology, &nodes, traffic)
        }
        None => PlacementProblem::declared(&topology, &nodes),
    };
    problem.workers = args.workers;
    note_ignored_workers(args.workers, args.placer);
    // Even and two-phase-traffic use at most one worker per slot: say so rather than print
    // fewer processes than asked for without a word.
    let total_slots: u64 = nodes.iter().map(|n| u64::from(n.slots)).sum();
    if let Some(k) = args.workers
        && u64::from(k) > total_slots
        && matches!(
            args.placer,
            StreamPlacerKind::Even | StreamPlacerKind::TwoPhaseTraffic
        )
    {
        eprintln!(
            "note: --workers {k} is more than the {} of the nodes {} uses: it runs at most \
             {total_slots}",
            count(total_slots, "worker slot"),
            args.placer
        );
    }
    if let Some(x) = args.max_utilisation
        && !(x > 0.0 && x <= 1.0)
    {
        bail!("--max-utilisation must be in (0, 1]");
    }
    note_ignored_one_phase_flags(args.placer, args.max_utilisation, args.refine);
    let defaults = OnePhase::default();
    let placer: Box<dyn StreamPlacer> = match args.placer {
        StreamPlacerKind::OnePhase => Box::new(OnePhase {
            max_utilisation: args.max_utilisation.unwrap_or(defaults.max_utilisation),
            refine: args.refine.unwrap_or(defaults.refine),
        }),
        other => other.build(),
    };
    let started = std::time::Instant::now();
    let placement = placer.place(&problem)?;
    let scheduling_ms = started.elapsed().as_secs_f64() * 1e3;
    // One-phase treats its limit as a target: when the topology needs more, it raises every
    // node's limit rather than fail (spec 04's first allocation). A limit the user asked for is
    // a cap, and a placement past it printed as a success read as one that kept it.
    if args.placer == StreamPlacerKind::OnePhase
        && let Some(cap) = args.max_utilisation
        && let Some(why) = past_cap(cap, &problem, &placement)
    {
        bail!("{why}");
    }
    let m = evaluate(&problem, &placement);
    let assignments: Vec<serde_json::Value> = placement
        .node
        .iter()
        .zip(&placement.process)
        .enumerate()
        .map(|(e, (&n, &p))| {
            serde_json::json!({
                "executor": topology.executor_name(ExecutorId(e as u32)),
                "node": nodes[n].name,
                "process": p,
            })
        })
        .collect();
    match args.output {
        Output::Json => {
            let doc = serde_json::json!({
                "placer": placer.name(),
                "assignments": assignments,
                "inter_node_traffic": m.inter_node_traffic,
                "inter_process_traffic": m.inter_process_traffic,
                "nodes_used": m.nodes_used,
                "processes_used": m.processes_used,
                "max_node_load": m.max_node_load,
                "overloaded_nodes": m.overloaded_nodes,
                "memory_overcommitted_nodes": m.memory_overcommitted_nodes,
                "scheduling_ms": scheduling_ms,
            });
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Output::Table => {
            println!(
                "{} placed `{}` ({}) on {} in {} {}: inter-node {:.1} tuples/s, inter-process {:.1} tuples/s, max node load {:.1} %, {} overloaded, {:.3} ms",
                placer.name(),
                topology.name,
                count(topology.executor_count() as u64, "executor"),
                count(m.nodes_used as u64, "node"),
                m.processes_used,
                agree(m.processes_used as u64, "process", "processes"),
                m.inter_node_traffic,
                m.inter_process_traffic,
                m.max_node_load,
                m.overloaded_nodes,
                scheduling_ms
            );
            if m.memory_overcommitted_nodes > 0 {
                println!(
                    "warning: {} given more executors' memory than they have (the topology's \
                     `memory` against the cluster's)",
                    count(m.memory_overcommitted_nodes as u64, "node")
                );
            }
            let loads = placement.node_loads(nodes.len(), &problem.loads);
            let mut table = Table::new();
            table.load_preset(UTF8_FULL_CONDENSED);
            table.set_header(["node", "process", "load (% of node)", "executors"]);
            let mut rows: Vec<(usize, u32)> = placement
                .node
                .iter()
                .zip(&placement.process)
                .map(|(&n, &p)| (n, p))
                .collect();
            rows.sort_unstable();
            rows.dedup();
            for (n, p) in rows {
                let execs: Vec<String> = (0..placement.node.len())
                    .filter(|&e| placement.node[e] == n && placement.process[e] == p)
                    .map(|e| topology.executor_name(ExecutorId(e as u32)))
                    .collect();
                table.add_row([
                    nodes[n].name.clone(),
                    p.to_string(),
                    format!(
                        "{:.1}",
                        (loads[n] + nodes[n].background) / nodes[n].capacity * 100.0
                    ),
                    execs.join(" "),
                ]);
            }
            println!("{table}");
        }
    }
    Ok(())
}
