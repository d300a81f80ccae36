//! `hetsched sim …`: the simulator's front door — the papers' experiments, and users' own cluster
//! and workload files under any policy.

use crate::input_file::read_input as read;
use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::input::Duration;
use hetsched_core::input::cluster::parse_cluster;
use hetsched_core::input::workload::{MissingProfile, parse_sim_workload};
use hetsched_core::model::application::AcceleratorNeed;
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_core::policy::batch::bound::lower_bound;
use hetsched_core::time::{Time, to_secs};
use hetsched_sim::scenario::hdas_paper;
use hetsched_sim::{IoReport, Progress, SimConfig, SimResult, simulate};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

/// The simulator's commands.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Reproduce the HDAS paper's experiment (spec 02): workloads A–Y under cpu-only, fifo,
    /// hadoop-model and hdas, with the paper's figures beside ours.
    HdasPaper(HdasPaperArgs),
    /// Reproduce the YARN accelerator paper's experiment (spec 01): MAGMA kernels and K-means on
    /// Cluster4-0…4-4 under plain, weighted and container binding, with the paper's findings beside.
    AccelPaper(crate::accel_paper::AccelPaperArgs),
    /// Run your own cluster and workload through spec 01's offload model: binding, per-node
    /// local/offloaded tasks and each ANode's pipeline stages.
    Accel(crate::sim_accel::AccelArgs),
    /// Compare spec 04's stream placers on five topologies and a 10-node heterogeneous cluster,
    /// with a stream simulation under a rate surge.
    StreamPaper(crate::sim_stream::StreamPaperArgs),
    /// Simulate your own cluster and workload files under one policy.
    Run(RunArgs),
    /// Simulate your own cluster and workload under several policies and compare them side by side.
    Compare(CompareArgs),
    /// Simulate a workflow (task graph) under the static, centralised or pcddb balancer.
    Graph(crate::graph::GraphArgs),
    /// Reproduce the PCDDB paper's experiment (spec 05): the MM5-like workflow on 36 nodes.
    PcddbPaper(crate::graph::PcddbPaperArgs),
    /// Plan and simulate one divisible load on your own star platform (spec 03): umr, umrlm,
    /// rumr or static.
    Divisible(crate::sim_divisible::DivisibleArgs),
    /// Reproduce the UMRLM paper's experiment (spec 03): UMR vs UMRLM on the paper's cluster (a master and 15 workers), worker
    /// order, memory, and RUMR vs UMR under prediction errors.
    DivisiblePaper(crate::sim_divisible::DivisiblePaperArgs),
    /// Every batch policy on seeded random clusters, heartbeats, noisy profiles and workloads,
    /// against the makespan lower bound: wins, losses, worst case, mean makespan / bound.
    Sweep(crate::sim_sweep::SweepArgs),
}

/// Options of `sim compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Cluster description (TOML).
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Workload (TOML).
    #[arg(long, value_name = "FILE")]
    pub workload: PathBuf,
    /// Policies to compare, comma-separated; `all` for every policy. Each runs once, in the order
    /// first named. Policies that cannot run the workload (cpu-only with a GPU-only application)
    /// are skipped with a note.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub policies: Vec<String>,
    #[command(flatten)]
    pub settings: SimSettingsArgs,
    /// Print a table or JSON (one summary per policy).
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Also write the summaries (the JSON `--output json` prints) as `compare.json` into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The run's settings `sim run` and `sim compare` share: one declaration, so the two commands
/// take the same options with the same defaults and checks ([`Case::config`]).
#[derive(Clone, Copy, Debug, Args)]
pub struct SimSettingsArgs {
    /// Seed of the simulation (heartbeat phases).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Heartbeat interval of every node, e.g. "1s" or "250ms"; at least 1ms.
    #[arg(long, default_value = "1s")]
    pub heartbeat: Duration,
    /// What heartbeats report as a node's disk load.
    #[arg(long, value_enum, default_value_t)]
    pub io_report: IoReportArg,
    /// Fair share between the workload's users (its applications' `user`): within a
    /// priority, the user whose work held the least of the cluster per share (`[[user]]
    /// shares`), decayed with this half-life (e.g. "1h"; at least 1m, as the server's), goes
    /// first — the server's `[fair_share]`. Off without it; the workload's caps hold either way.
    #[arg(long, value_name = "HALF_LIFE")]
    pub fair_share: Option<Duration>,
    #[command(flatten)]
    pub preempt: PreemptionArgs,
}

/// Priority preemption in a simulation: the server's `preemption` and `preempt_exempt_time`.
#[derive(Clone, Copy, Debug, Args)]
pub struct PreemptionArgs {
    /// Priority preemption, as the server's `preemption = "requeue"`: waiting work of a higher
    /// priority that fits nowhere stops lower-priority tasks, which lose their progress and run
    /// again (docs/runtime.md, Preemption).
    #[arg(long)]
    pub preemption: bool,
    /// Under --preemption, a task that has run less than this is not stopped (e.g. "10m").
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        requires = "preemption"
    )]
    pub preempt_exempt_time: Duration,
}

/// How results are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable tables.
    #[default]
    Table,
    /// One JSON document on stdout.
    Json,
}

/// What a heartbeat reports as a node's disk load (spec 02's `TotalIO` and `#IOtask`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum IoReportArg {
    /// Reads the disk is serving now (a CPU task counts with its current chunk only).
    #[default]
    InFlight,
    /// Every task with input left, with all its unread bytes.
    Remaining,
}

impl From<IoReportArg> for IoReport {
    fn from(a: IoReportArg) -> IoReport {
        match a {
            IoReportArg::InFlight => IoReport::InFlight,
            IoReportArg::Remaining => IoReport::Remaining,
        }
    }
}

/// Options of `sim hdas-paper`.
#[derive(Debug, Args)]
pub struct HdasPaperArgs {
    /// Also write CSV, JSON and SVG plots (the paper's figures 3, 4, 6, 8, 9, 10) into this
    /// directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Seed of the simulation (heartbeat phases).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Multiply every application's task count (1.0 = the documented experiment; 0.1 for a
    /// quick look); more than 0, at most 10.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub scale: f64,
    /// What heartbeats report as a node's disk load.
    #[arg(long, value_enum, default_value_t)]
    pub io_report: IoReportArg,
    /// The policy in the HDAS column: hdas (as published) or hdas-hetero (beyond the paper).
    #[arg(long, default_value = "hdas")]
    pub hdas_policy: BatchPolicyKind,
    /// Run only these workloads (letters A–Y in either case, comma-separated); all 25 by default.
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<char>,
    /// Print a table or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// Options of `sim run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Cluster description (TOML), e.g. examples/cluster-hdas-paper.toml.
    #[arg(long, value_name = "FILE")]
    pub cluster: PathBuf,
    /// Workload (TOML), e.g. examples/workload-knn-nb-bp.toml.
    #[arg(long, value_name = "FILE")]
    pub workload: PathBuf,
    /// Scheduling policy: hdas, hdas-hetero, hadoop-model, drf, fifo or cpu-only.
    #[arg(long, default_value = "hdas")]
    pub policy: BatchPolicyKind,
    #[command(flatten)]
    pub settings: SimSettingsArgs,
    /// Print a table or JSON (the whole result, task records included).
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
    /// Also write the result as `result.json` into this directory (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs one simulator command.
pub fn run(cmd: SimCommand) -> anyhow::Result<()> {
    match cmd {
        SimCommand::HdasPaper(args) => hdas_paper_cmd(args),
        SimCommand::AccelPaper(args) => crate::accel_paper::run(args),
        SimCommand::Accel(args) => crate::sim_accel::run(args),
        SimCommand::StreamPaper(args) => crate::sim_stream::run_cmd(args),
        SimCommand::Run(args) => run_cmd(args),
        SimCommand::Compare(args) => compare_cmd(args),
        SimCommand::Graph(args) => crate::graph::graph_cmd(args),
        SimCommand::PcddbPaper(args) => crate::graph::pcddb_paper_cmd(args),
        SimCommand::Divisible(args) => crate::sim_divisible::divisible_cmd(args),
        SimCommand::DivisiblePaper(args) => crate::sim_divisible::divisible_paper_cmd(args),
        SimCommand::Sweep(args) => crate::sim_sweep::run(args),
    }
}

/// The simulator commands' progress bar style: `template` (indicatif's) drawn with `=> `; the
/// default bar should the template not parse, since a bar is no reason to fail a run.
pub(crate) fn bar_style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

fn progress_bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(bar_style(
        "{msg:>12} [{bar:40}] {pos}/{len} tasks ({elapsed})",
    ));
    bar.set_message(what.to_string());
    bar
}

fn hdas_paper_cmd(args: HdasPaperArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.out {
        crate::out_dir::prepare(dir)?;
    }
    let mut options = hdas_paper::HdasPaperOptions::default();
    options.sim.seed = args.seed;
    options.scale = args.scale;
    options.workloads = args.workloads.clone();
    options.sim.io_report = args.io_report.into();
    options.hdas_policy = args.hdas_policy;
    let bar = ProgressBar::new(0);
    bar.set_style(bar_style(
        "hdas-paper [{bar:40}] {pos}/{len} simulations ({elapsed}) {msg}",
    ));
    let report = hdas_paper::run(&options, &mut |p: hdas_paper::ScenarioProgress| {
        bar.set_length(p.runs_total as u64);
        bar.set_position(p.runs_done as u64);
        bar.set_message(p.last);
    })
    .map_err(|e| under_flag(e, &["scale", "hdas_policy", "workloads"]))?;
    bar.finish_and_clear();
    crate::sim::emit_report(
        args.output,
        || report.render_table(),
        &report,
        args.out.as_deref(),
        |dir| report.write_outputs(dir),
    )
}

/// A scenario's refusal of one of its options (`SimError::Config`) said under the command-line
/// flag that set it, `--scale: must be a positive number, not -1`, when its field is one of
/// `flags` (the scenario's options the command takes as flags, named alike with `_` for `-`);
/// any other error as it is.
pub(crate) fn under_flag(e: hetsched_sim::SimError, flags: &[&str]) -> anyhow::Error {
    match e {
        hetsched_sim::SimError::Config { field, problem } if flags.contains(&field) => {
            anyhow::anyhow!("--{}: {problem}", field.replace('_', "-"))
        }
        e => e.into(),
    }
}

/// A cluster and workload read from files and checked against each other.
struct Case {
    cluster: hetsched_core::Cluster,
    apps: Vec<hetsched_core::Application>,
    /// The users' shares and caps (`[[user]]`).
    users: Vec<hetsched_core::UserLimits>,
    /// Each application's `accelerator` need, in `apps` order.
    accelerator: Vec<AcceleratorNeed>,
    origin: String,
    total_tasks: u64,
    /// The fluid lower bound on any schedule's makespan, seconds.
    bound_s: f64,
}

fn load_case(cluster: &Path, workload: &Path) -> anyhow::Result<Case> {
    let cluster_origin = cluster.display().to_string();
    let cluster = parse_cluster(&cluster_origin, &read(cluster)?)?;
    let origin = workload.display().to_string();
    let workload = parse_sim_workload(&origin, &read(workload)?)?;
    workload.check_runnable(&cluster.nodes)?;
    // A variant no node holds is runnable beside one that fits, and never runs: said here, so a
    // typo (`gpus = 5` on 1-GPU nodes) does not pass as a result of the other variant alone.
    for unfit in workload.unfit_variants(&cluster.nodes) {
        eprintln!("warning: {unfit}");
    }
    let apps = workload.to_applications(0, MissingProfile::Refuse)?;
    let bound_s = lower_bound(&cluster, &apps)
        .with_context(|| format!("{origin}: computing the makespan lower bound"))?
        .lower_bound_s;
    Ok(Case {
        bound_s,
        cluster,
        users: workload.user_limits(),
        accelerator: workload
            .applications
            .iter()
            .map(|a| a.accelerator_need())
            .collect(),
        apps,
        origin,
        total_tasks: workload.total_tasks(),
    })
}

impl Case {
    /// Why `policy` cannot run this workload, if it cannot.
    fn refusal(&self, policy: BatchPolicyKind) -> Option<String> {
        if policy != BatchPolicyKind::CpuOnly {
            return None;
        }
        self.apps
            .iter()
            .zip(
                self.accelerator
                    .iter()
                    .chain(std::iter::repeat(&AcceleratorNeed::None)),
            )
            .find_map(|(a, need)| {
                let why = if a.cpu.is_none() {
                    "has no CPU variant"
                } else if *need == AcceleratorNeed::Required {
                    "requires an accelerator (`accelerator = \"required\"`)"
                } else {
                    return None;
                };
                Some(format!(
                    "{}: application `{}` {why}, so the cpu-only policy cannot run it",
                    self.origin, a.name
                ))
            })
    }

    /// The run's settings: the command line's, with the workload's users.
    fn config(&self, settings: SimSettingsArgs) -> anyhow::Result<SimConfig> {
        let SimSettingsArgs {
            seed,
            heartbeat,
            io_report,
            fair_share,
            preempt,
        } = settings;
        Ok(SimConfig {
            users: self.users.clone(),
            accelerator: self.accelerator.clone(),
            preemption: preempt.preemption,
            preempt_exempt_time: preempt.preempt_exempt_time.0,
            ..sim_config(heartbeat, seed, io_report, fair_share)?
        })
    }

    fn simulate(&self, policy: BatchPolicyKind, config: &SimConfig) -> anyhow::Result<SimResult> {
        let mut p = policy.build();
        let bar = progress_bar(self.total_tasks, policy.as_str());
        let result = simulate(
            &self.cluster,
            &self.apps,
            p.as_mut(),
            config,
            &mut |p: Progress| {
                bar.set_position(p.completed_tasks);
            },
        )?;
        bar.finish_and_clear();
        Ok(result)
    }
}

/// The shortest `--heartbeat`: 1 ms. Below it a run spends its time on heartbeats (a 1 ns
/// heartbeat is a billion events per node per simulated second) and no cluster beats that often.
const MIN_HEARTBEAT: Time = 1_000_000;

fn sim_config(
    heartbeat: Duration,
    seed: u64,
    io_report: IoReportArg,
    fair_share: Option<Duration>,
) -> anyhow::Result<SimConfig> {
    if let Some(h) = fair_share {
        hetsched_core::model::fair_share::check_half_life("--fair-share", h.0)?;
    }
    if heartbeat.0 < MIN_HEARTBEAT {
        bail!(
            "--heartbeat must be at least 1ms (nodes beat every second by default), got {} ns",
            heartbeat.0
        );
    }
    Ok(SimConfig {
        heartbeat_interval: heartbeat.0,
        seed,
        io_report: io_report.into(),
        fair_share: fair_share.map(|h| h.0),
        ..SimConfig::default()
    })
}

fn run_cmd(args: RunArgs) -> anyhow::Result<()> {
    let inputs = [
        ("--cluster", args.cluster.as_path()),
        ("--workload", args.workload.as_path()),
    ];
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "result.json", &inputs)?;
    let case = load_case(&args.cluster, &args.workload)?;
    if let Some(why) = case.refusal(args.policy) {
        bail!(why);
    }
    let result = case.simulate(args.policy, &case.config(args.settings)?)?;
    let json = with_bound(&result, case.bound_s)?;
    emit_json(args.output, &json, &out, || {
        print_result(&result, case.bound_s)
    })
}

/// Writes a command's JSON `json` to its `--out` file, if any, then prints it (`--output json`)
/// or the command's table (`table`): what `sim run`, `compare`, `graph`, `divisible`, `accel`
/// and `sweep` end with.
pub(crate) fn emit_json(
    output: Output,
    json: &str,
    out: &crate::out_dir::Named,
    table: impl FnOnce(),
) -> anyhow::Result<()> {
    out.write_text(json)?;
    match output {
        Output::Table => table(),
        Output::Json => println!("{json}"),
    }
    Ok(())
}

fn compare_cmd(args: CompareArgs) -> anyhow::Result<()> {
    // Each policy runs once, where it was first named: `fifo,hdas,fifo` or `hdas,all` would
    // otherwise simulate (and print) a policy twice. Spaces after commas are what people type.
    let mut policies: Vec<BatchPolicyKind> = Vec::new();
    for name in args.policies.iter().map(|n| n.trim()) {
        if name.is_empty() {
            bail!(
                "--policies: an empty name (nothing given, or a stray comma): name policies \
                 comma-separated, or `all`"
            );
        }
        let named = if name == "all" {
            BatchPolicyKind::ALL.to_vec()
        } else {
            vec![
                name.parse::<BatchPolicyKind>()
                    .map_err(|e| anyhow::anyhow!("--policies: {e}"))?,
            ]
        };
        for policy in named {
            if !policies.contains(&policy) {
                policies.push(policy);
            }
        }
    }
    let inputs = [
        ("--cluster", args.cluster.as_path()),
        ("--workload", args.workload.as_path()),
    ];
    let out = crate::out_dir::Named::prepare(args.out.as_deref(), "compare.json", &inputs)?;
    let case = load_case(&args.cluster, &args.workload)?;
    let config = case.config(args.settings)?;
    let mut rows = Vec::new();
    for policy in policies {
        match case.refusal(policy) {
            Some(why) => eprintln!("skipping {policy}: {why}"),
            None => rows.push(case.simulate(policy, &config)?),
        }
    }
    let Some(fifo) = rows
        .iter()
        .find(|r| r.policy == "fifo")
        .or(rows.first())
        .map(|r| (r.policy.clone(), r.makespan_s))
    else {
        bail!("no policy could run this workload");
    };
    let summaries: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "policy": r.policy,
                "makespan_s": r.makespan_s,
                "average_task_delay": r.average_task_delay,
                "gpu_tasks": r.gpu_tasks,
                "cpu_tasks": r.cpu_tasks,
                "vs_reference": r.makespan_s / fifo.1 - 1.0,
                "reference": fifo.0,
                "lower_bound_s": case.bound_s,
                "makespan_over_bound": r.makespan_s / case.bound_s,
                "preemptions": r.preemptions,
                "users": r.users,
                // The seed it ran with: with the files and flags, it makes the run again.
                "seed": args.settings.seed,
            })
        })
        .collect();
    let json = serde_json::to_string_pretty(&summaries)?;
    emit_json(args.output, &json, &out, || {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let vs = format!("vs {}", fifo.0);
        let with_users = rows.iter().any(|r| !r.users.is_empty());
        let preempting = args.settings.preempt.preemption;
        let mut header = vec![
            "policy",
            "makespan (s)",
            vs.as_str(),
            "average task delay",
            "on GPU",
            "on CPU",
            "bound (s)",
            "makespan / bound",
        ];
        if preempting {
            header.push("preempted");
        }
        if with_users {
            header.push("users' mean turnaround (s)");
        }
        table.set_header(header);
        for r in &rows {
            let mut row = vec![
                r.policy.clone(),
                format!("{:.1}", r.makespan_s),
                format!("{:+.1} %", (r.makespan_s / fifo.1 - 1.0) * 100.0),
                format!("{:.2}×", r.average_task_delay),
                r.gpu_tasks.to_string(),
                r.cpu_tasks.to_string(),
                format!("{:.1}", case.bound_s),
                format!("{:.3}", r.makespan_s / case.bound_s),
            ];
            if preempting {
                row.push(r.preemptions.to_string());
            }
            if with_users {
                row.push(
                    r.users
                        .iter()
                        .map(|u| match limits(u) {
                            Some(l) => format!("{} {:.1} ({l})", u.user, u.mean_turnaround_s),
                            None => format!("{} {:.1}", u.user, u.mean_turnaround_s),
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
            table.add_row(row);
        }
        println!("{table}");
    })
}

/// The result as JSON with the lower bound added (`lower_bound_s`, `makespan_over_bound`).
fn with_bound(r: &SimResult, bound_s: f64) -> anyhow::Result<String> {
    let mut v = serde_json::to_value(r)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("lower_bound_s".into(), serde_json::json!(bound_s));
        o.insert(
            "makespan_over_bound".into(),
            serde_json::json!(r.makespan_s / bound_s),
        );
    }
    Ok(serde_json::to_string_pretty(&v)?)
}

fn print_result(r: &SimResult, bound_s: f64) {
    println!(
        "policy {}: makespan {:.1} s, {} ({} on GPUs, {} on CPUs), average task delay {:.2}×",
        r.policy,
        r.makespan_s,
        hetsched_core::text::count(r.total_tasks, "task"),
        r.gpu_tasks,
        r.cpu_tasks,
        r.average_task_delay
    );
    println!(
        "lower bound {:.1} s (fluid LP, see docs/bound.md): makespan / bound {:.3}",
        bound_s,
        r.makespan_s / bound_s
    );
    if r.preemptions > 0 {
        println!(
            "{} preempted for work of a higher priority, each run again",
            hetsched_core::text::count(r.preemptions, "task attempt")
        );
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![
        "application",
        "tasks",
        "on GPU",
        "on CPU",
        "completed at (s)",
        "turnaround (s)",
        "mean delay",
    ];
    if r.preemptions > 0 {
        header.push("preempted");
    }
    table.set_header(header);
    for a in &r.apps {
        let mut row = vec![
            a.name.clone(),
            a.tasks.to_string(),
            a.gpu_tasks.to_string(),
            a.cpu_tasks.to_string(),
            format!("{:.1}", a.completion_s),
            format!(
                "{:.1}",
                to_secs(a.completion_ns.saturating_sub(a.submit_ns))
            ),
            format!("{:.2}×", a.mean_slowdown),
        ];
        if r.preemptions > 0 {
            row.push(a.preempted.to_string());
        }
        table.add_row(row);
    }
    println!("{table}");
    if !r.users.is_empty() {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED);
        let mut header = vec![
            "user",
            "applications",
            "tasks",
            "mean wait (s)",
            "mean turnaround (s)",
            "last end (s)",
        ];
        // Only a workload with `[[user]]` limits gets the column.
        let with_limits = r.users.iter().any(|u| limits(u).is_some());
        if with_limits {
            header.push("shares, caps");
        }
        table.set_header(header);
        for u in &r.users {
            let mut row = vec![
                u.user.clone(),
                u.apps.to_string(),
                u.tasks.to_string(),
                format!("{:.1}", u.mean_wait_s),
                format!("{:.1}", u.mean_turnaround_s),
                format!("{:.1}", u.last_end_s),
            ];
            if with_limits {
                row.push(limits(u).unwrap_or_else(|| "-".into()));
            }
            table.add_row(row);
        }
        println!("{table}");
    }
}

/// A user's shares and caps in a few words (`3 shares, ≤ 8 cores, 64 GiB, 1 GPU`); `None` for
/// the defaults (1 share, no cap).
fn limits(u: &hetsched_sim::metrics::UserResult) -> Option<String> {
    let mut parts = Vec::new();
    if u.shares != 1 {
        parts.push(format!("{} shares", u.shares));
    }
    let caps: Vec<String> = [
        u.max_cores.map(|c| hetsched_core::text::count(c, "core")),
        u.max_memory_bytes
            .map(|m| bytesize::ByteSize(m).to_string()),
        u.max_gpus
            .map(|g| format!("{g} GPU{}", if g == 1 { "" } else { "s" })),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !caps.is_empty() {
        parts.push(format!("≤ {}", caps.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Prints a scenario's report — its table, or JSON with `--output json` — and, with `--out DIR`,
/// writes its CSV, JSON and SVG files there. Every `sim …-paper` command ends this way.
pub(crate) fn emit_report<R, E>(
    output: Output,
    table: impl FnOnce() -> String,
    report: &R,
    out: Option<&Path>,
    write: impl FnOnce(&Path) -> Result<Vec<PathBuf>, E>,
) -> anyhow::Result<()>
where
    R: serde::Serialize,
    E: std::error::Error + Send + Sync + 'static,
{
    match output {
        Output::Table => {
            let table = table();
            if table.ends_with('\n') {
                print!("{table}");
            } else {
                println!("{table}");
            }
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(report)?),
    }
    if let Some(dir) = out {
        crate::out_dir::prepare(dir)?;
        let written =
            write(dir).with_context(|| format!("writing results to {}", dir.display()))?;
        eprintln!(
            "wrote {} files (CSV, JSON, SVG plots) to {}",
            written.len(),
            dir.display()
        );
    }
    Ok(())
}
