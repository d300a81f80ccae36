//! `hetsched sim accel`: your own cluster and workload files through spec 01's offload model —
//! node binding (plain, weighted or container) and each ANode's three-stage accelerator service.
//! Applications run one after another; each one's `accelerator` field decides where its tasks go
//! (`none`: CPUs; `required`: an accelerator, local or through the binding; `preferred`: an
//! accelerator where the node reaches one, else its CPU). The conversion rules (times, sizes,
//! result size = input size) are in `hetsched_sim::accel::workload`.

use clap::Args;
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::input::cluster::parse_cluster;
use hetsched_core::input::workload::parse_sim_workload;
use hetsched_core::policy::binding::BindingMode;
use hetsched_core::time::to_secs;
use hetsched_sim::accel::workload::accel_apps;
use hetsched_sim::accel::{AccelConfig, AccelResult, simulate_accel};
use serde::Serialize;
use std::path::PathBuf;

use crate::binding::ModeArg;
use crate::sim::Output;

/// Options of `sim accel`.
#[derive(Debug, Args)]
pub struct AccelArgs {
    /// Cluster description (TOML): nodes with `accelerator` entries are ANodes, the others NNodes.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Workload (TOML). Read: each application's `name`, `tasks` (or `indices`, `entries`),
    /// `split` (bytes shipped each way when offloaded), `accelerator`, `cpu.compute` and
    /// `gpu.compute + gpu.copy`. What `sim run` refuses is refused alike; `requires`,
    /// `priority`, `submit_at`, `max_running`, `user`, `[[user]]`, `[[divisible]]` and a
    /// variant's `cores`, `memory`, `gpus` and `kind` are refused (applications run one after
    /// another from t = 0, each task in one container, on one device of any kind).
    #[arg(long, value_name = "FILE")]
    pub workload: PathBuf,
    /// How NNodes are bound: plain (spec 01), weighted (by accelerator speed), container (each of
    /// a node's --slots containers bound on its own).
    #[arg(long, value_enum, default_value_t)]
    pub binding: ModeArg,
    /// Containers (task slots) per node: 1 to 1024, and at most 1,000,000 in all (nodes ×
    /// slots).
    #[arg(long, default_value_t = 8, value_parser = crate::binding::slots_arg)]
    pub slots: u32,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Write every node's link and every network transfer (an offloaded input or result: nodes,
    /// bytes, start, end) as JSON to this file; `scripts/simgrid-accel.sh` replays them in SimGrid.
    #[arg(long, value_name = "FILE.json")]
    pub export: Option<PathBuf>,
    /// Also write the report (the JSON `--output json` prints) as `accel.json` into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The `--export` document: `{"links":[{"name","bandwidth","latency"}],
/// "transfers":[{"src","dst","bytes","start","end"}],"makespan"}` (bytes per second, seconds).
#[derive(Debug, Serialize)]
struct Export<'a> {
    links: Vec<LinkLine<'a>>,
    transfers: Vec<TransferLine<'a>>,
    makespan: f64,
}

#[derive(Debug, Serialize)]
struct LinkLine<'a> {
    name: &'a str,
    bandwidth: f64,
    latency: f64,
}

#[derive(Debug, Serialize)]
struct TransferLine<'a> {
    src: &'a str,
    dst: &'a str,
    bytes: u64,
    start: f64,
    end: f64,
}

fn export<'a>(cluster: &'a hetsched_core::Cluster, r: &AccelResult) -> Export<'a> {
    let name = |i: u32| {
        cluster
            .nodes
            .get(i as usize)
            .map_or("", |n| n.name.as_str())
    };
    Export {
        links: cluster
            .nodes
            .iter()
            .map(|n| LinkLine {
                name: &n.name,
                bandwidth: n.net_bw,
                latency: to_secs(n.net_latency),
            })
            .collect(),
        transfers: r
            .transfers
            .iter()
            .map(|t| TransferLine {
                src: name(t.src),
                dst: name(t.dst),
                bytes: t.bytes,
                start: to_secs(t.start),
                end: to_secs(t.end),
            })
            .collect(),
        makespan: r.makespan_s,
    }
}

/// The JSON report (keys are stable).
#[derive(Debug, Serialize)]
struct Report {
    cluster: String,
    workload: String,
    binding: String,
    slots: u32,
    makespan_s: f64,
    applications: Vec<AppLine>,
    accelerator_tasks: u64,
    cpu_tasks: u64,
    offloaded_tasks: u64,
    map: Vec<MapLine>,
    nodes: Vec<hetsched_sim::accel::NodeStats>,
    anodes: Vec<ANodeLine>,
}

#[derive(Debug, Serialize)]
struct AppLine {
    name: String,
    accelerator: &'static str,
    tasks: u32,
    end_s: f64,
}

#[derive(Debug, Serialize)]
struct MapLine {
    nnode: String,
    anode: Option<String>,
}

#[derive(Debug, Serialize)]
struct ANodeLine {
    name: String,
    tasks: u64,
    offloaded: u64,
    receive_busy_s: f64,
    device_busy_s: f64,
    write_busy_s: f64,
}

/// Runs `sim accel`.
pub fn run(args: AccelArgs) -> anyhow::Result<()> {
    let read = |p: &PathBuf| crate::input_file::read_input(p);
    let inputs = [
        ("--cluster", args.cluster.as_path()),
        ("--workload", args.workload.as_path()),
    ];
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "accel.json", &inputs)?;
    out.check_file("--export", args.export.as_deref(), &inputs)?;
    let cluster_origin = args.cluster.display().to_string();
    let cluster = parse_cluster(&cluster_origin, &read(&args.cluster)?)?;
    let workload_origin = args.workload.display().to_string();
    let workload = parse_sim_workload(&workload_origin, &read(&args.workload)?)?;
    let apps = accel_apps(&workload, &cluster)?;
    let config = AccelConfig {
        binding: match args.binding {
            ModeArg::Plain => BindingMode::Plain,
            ModeArg::Weighted => BindingMode::Weighted,
            ModeArg::Container => BindingMode::Container { slots: args.slots },
        },
        slots: args.slots,
        ..AccelConfig::default()
    };
    let result = simulate_accel(&cluster, &apps, &config)?;
    if let Some(path) = &args.export {
        crate::out_dir::write_text(path, &serde_json::to_string(&export(&cluster, &result))?)?;
    }
    let report = report(&args, &apps, result, cluster_origin, workload_origin);
    let json = serde_json::to_string_pretty(&report)?;
    crate::sim::emit_json(args.output, &json, &out, || print_table(&report))
}

fn report(
    args: &AccelArgs,
    apps: &[hetsched_sim::accel::AccelApp],
    r: AccelResult,
    cluster: String,
    workload: String,
) -> Report {
    Report {
        cluster,
        workload,
        binding: r.binding,
        slots: args.slots,
        makespan_s: r.makespan_s,
        applications: apps
            .iter()
            .zip(&r.app_end_ns)
            .map(|(a, &end)| AppLine {
                name: a.name.clone(),
                accelerator: a.need.as_str(),
                tasks: a.tasks,
                end_s: to_secs(end),
            })
            .collect(),
        accelerator_tasks: r.accelerator_tasks,
        cpu_tasks: r.cpu_tasks,
        offloaded_tasks: r.offloaded_tasks,
        map: r
            .map
            .iter()
            .map(|line| {
                let (nnode, anode) = line.split_once(" -> ").unwrap_or((line, "unbound"));
                MapLine {
                    nnode: nnode.to_string(),
                    anode: (anode != "unbound").then(|| anode.to_string()),
                }
            })
            .collect(),
        nodes: r.nodes,
        anodes: r
            .anodes
            .into_iter()
            .map(|a| ANodeLine {
                name: a.name,
                tasks: a.tasks,
                offloaded: a.offloaded,
                receive_busy_s: to_secs(a.receive_busy_ns),
                device_busy_s: to_secs(a.device_busy_ns),
                write_busy_s: to_secs(a.write_busy_ns),
            })
            .collect(),
    }
}

fn print_table(r: &Report) {
    println!(
        "{} on {}, binding {}, {} containers per node",
        r.workload, r.cluster, r.binding, r.slots
    );
    println!("makespan: {:.1} s", r.makespan_s);
    for a in &r.applications {
        println!(
            "  {} ({} tasks, accelerator = {}): ends at {:.1} s",
            a.name, a.tasks, a.accelerator, a.end_s
        );
    }
    println!(
        "tasks: {} on accelerators ({} offloaded), {} on CPUs",
        r.accelerator_tasks, r.offloaded_tasks, r.cpu_tasks
    );
    println!("binding map:");
    for m in &r.map {
        println!(
            "  {} -> {}",
            m.nnode,
            m.anode.as_deref().unwrap_or("unbound")
        );
    }
    let mut nodes = Table::new();
    nodes.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "node",
        "rack",
        "kind",
        "cpu tasks",
        "local accelerator",
        "offloaded",
    ]);
    for n in &r.nodes {
        nodes.add_row(vec![
            n.name.clone(),
            n.rack.clone(),
            if n.anode { "ANode" } else { "NNode" }.to_string(),
            n.cpu_tasks.to_string(),
            n.local_accelerator_tasks.to_string(),
            n.offloaded_tasks.to_string(),
        ]);
    }
    println!("{nodes}");
    if r.anodes.is_empty() {
        println!("no ANodes: every task ran on a CPU");
        return;
    }
    let mut anodes = Table::new();
    anodes.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "ANode",
        "tasks",
        "offloaded in",
        "receive busy s",
        "device busy s",
        "write busy s",
    ]);
    for a in &r.anodes {
        anodes.add_row(vec![
            a.name.clone(),
            a.tasks.to_string(),
            a.offloaded.to_string(),
            format!("{:.1}", a.receive_busy_s),
            format!("{:.1}", a.device_busy_s),
            format!("{:.1}", a.write_busy_s),
        ]);
    }
    println!("{anodes}");
}
