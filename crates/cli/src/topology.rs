//! `hetsched topology …`: long-running stream topologies on the runtime (issue 16, spec 04) —
//! `submit FILE`, `list`, `show NAME`, `log NAME`, `kill NAME`, `rebalance NAME`, `purge NAME` —
//! and the hidden `hetsched stream-worker --config FILE`, the worker process agents start
//! (`hetsched_stream::process`).

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use hetsched_core::input::stream_code::parse_runnable_topology;
use hetsched_core::policy::stream::StreamPlacerKind;
use hetsched_core::text::count;
use hetsched_proto as pb;
use hetsched_proto::topology_client_client::TopologyClientClient;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

use crate::runtime::human::shown;
use crate::runtime::{ClientArgs, Output};

/// Stream topology commands.
#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Submit a topology (TOML with `builtin`/`command` per component); it runs until killed.
    Submit(SubmitArgs),
    /// List topologies.
    List(ClientOnly),
    /// A topology's placement, per-executor rates, per-pair traffic, per-node load, latency and
    /// reschedules.
    Show(Named),
    /// A running worker's stderr (its components' warnings, multi-language spouts' and bolts'
    /// stderr), read from its agent through the server; the topology's owner and the admin only.
    Log(LogArgs),
    /// Stop a topology's workers.
    Kill(Named),
    /// Place a topology again now from its measured traffic (applied if it changes).
    Rebalance(Named),
    /// Forget a killed topology: its record and traffic leave the server's store and its name
    /// is free (the `[retention]` rule's `keep_finished` does this by itself).
    Purge(Named),
}

/// Options of `topology submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Topology file (TOML).
    pub file: PathBuf,
    /// Placer: one-phase (default: one worker per node it uses, nodes chosen by traffic) or
    /// even (Storm's round-robin over `--workers` workers); resource-aware and
    /// two-phase-traffic are accepted too.
    #[arg(long, default_value = "one-phase")]
    pub placer: StreamPlacerKind,
    /// User-fixed worker count (even, two-phase-traffic), 1 to 100000; one per node when
    /// absent.
    #[arg(long)]
    pub workers: Option<u32>,
    /// Least time between two reschedule computations (spec 04's time threshold); 0 = never.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// Least relative inter-node traffic gain for a traffic-driven reschedule (0.1 = 10 %).
    #[arg(long, default_value_t = 0.1)]
    pub gain_threshold: f64,
    /// One-phase: share of each node's CPU its self-tuning may fill (0 < x ≤ 1; default 0.9).
    /// Other placers ignore it, and the submission says so.
    #[arg(long)]
    pub max_utilisation: Option<f64>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Commands that take only the server options.
#[derive(Debug, Args)]
pub struct ClientOnly {
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Commands on one topology.
#[derive(Debug, Args)]
pub struct Named {
    /// The topology's name.
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Options of `topology log`.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// The topology's name.
    pub name: String,
    /// The worker (as `topology show` numbers them).
    #[arg(long, default_value_t = 0)]
    pub worker: u32,
    /// Only the last BYTES of it.
    #[arg(long, value_name = "BYTES")]
    pub tail: Option<u32>,
    /// Keep printing what it writes until it stops (Ctrl-C to end).
    #[arg(short, long)]
    pub follow: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Bytes asked for per page of `topology log`.
const LOG_PAGE: u32 = 256 << 10;

/// `hetsched topology log`: pages of the worker's stderr from `--tail`'s offset (or the start),
/// then, with `--follow`, what it writes next, until the worker no longer runs.
async fn worker_log(a: LogArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let mut api = connect(&a.client).await?;
    let mut offset = a.tail.map_or(0, |t| -i64::from(t));
    let mut first = true;
    let out = std::io::stdout();
    let mut out = out.lock();
    loop {
        let page = match api
            .worker_log(pb::WorkerLogRequest {
                name: a.name.clone(),
                worker: a.worker,
                offset,
                limit: LOG_PAGE,
            })
            .await
        {
            Ok(p) => p.into_inner(),
            // Followed until it stopped (killed, moved): what it wrote has been printed.
            Err(_) if !first && a.follow => return Ok(()),
            Err(s) => return Err(refused(s)),
        };
        if first && !page.exists && !a.follow {
            eprintln!(
                "worker {} of topology `{}` (on {}) has written nothing on its stderr",
                a.worker, a.name, page.node
            );
        }
        first = false;
        out.write_all(&page.data)?;
        out.flush()?;
        offset = (page.offset + page.data.len() as u64) as i64;
        if !page.data.is_empty() && (offset as u64) < page.size {
            continue;
        }
        if !a.follow {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Options of the hidden `stream-worker` command.
#[derive(Debug, Args)]
pub struct StreamWorkerArgs {
    /// The worker's configuration (JSON, written by the agent).
    #[arg(long)]
    pub config: PathBuf,
    /// How often the worker reports its counters on stdout.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub report_every: Duration,
}

type Api = TopologyClientClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        pb::TokenInterceptor,
    >,
>;

/// The largest topology reply the client reads.
const MAX_REPLY_BYTES: usize = 256 << 20;

async fn connect(args: &ClientArgs) -> anyhow::Result<Api> {
    let token = args.token()?;
    let ca = match &args.ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    let server = args.url();
    super::runtime::check_tls(&server, args.ca.is_some())?;
    let channel = pb::endpoint(&server, ca.as_deref())?
        .connect()
        .await
        .with_context(|| format!("connecting to {server} (is `hetsched server` running?)"))?;
    // A listing carries every topology's executors and their places: up to
    // MAX_RUNTIME_EXECUTORS each, more than tonic's default 4 MiB for a few large ones.
    Ok(
        TopologyClientClient::with_interceptor(channel, pb::TokenInterceptor::new(&token)?)
            .max_decoding_message_size(MAX_REPLY_BYTES),
    )
}

fn refused(s: tonic::Status) -> anyhow::Error {
    match s.code() {
        tonic::Code::InvalidArgument
        | tonic::Code::NotFound
        | tonic::Code::AlreadyExists
        | tonic::Code::FailedPrecondition => anyhow::anyhow!("{}", s.message()),
        tonic::Code::Unimplemented => anyhow::Error::new(crate::runtime::human::Exit {
            status: crate::runtime::human::PROTOCOL_STATUS,
            message: "this server does not run stream topologies: it is older than this client \
                      (`hetsched --version` here, `hetsched user whoami` says the server's)"
                .into(),
        }),
        _ => crate::runtime::refused(s),
    }
}

/// Runs a `topology` command.
pub fn run(cmd: TopologyCommand) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(run_async(cmd))
}

async fn run_async(cmd: TopologyCommand) -> anyhow::Result<()> {
    match cmd {
        TopologyCommand::Submit(a) => {
            let origin = a.file.display().to_string();
            let text = crate::input_file::read_input(&a.file)?;
            // The same parser the server runs: errors before any connection.
            parse_runnable_topology(&origin, &text)?;
            if let Some(x) = a.max_utilisation
                && !(x > 0.0 && x <= 1.0)
            {
                bail!("--max-utilisation must be in (0, 1]");
            }
            crate::stream::check_workers(a.workers)?;
            crate::stream::note_ignored_workers(a.workers, a.placer);
            crate::stream::note_ignored_one_phase_flags(a.placer, a.max_utilisation, None);
            let base_dir = std::env::current_dir()?.display().to_string();
            let mut api = connect(&a.client).await?;
            let r = api
                .submit_topology(pb::SubmitTopologyRequest {
                    origin,
                    text,
                    base_dir,
                    placer: a.placer.as_str().to_string(),
                    workers: a.workers.unwrap_or(0),
                    interval_ms: a.interval.as_millis() as u64,
                    gain_threshold: a.gain_threshold,
                    max_utilisation: a.max_utilisation.unwrap_or(
                        hetsched_core::policy::stream::one_phase::OnePhase::default()
                            .max_utilisation,
                    ),
                })
                .await
                .map_err(refused)?
                .into_inner();
            let v = status_of(&r)?;
            match a.client.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&v)?),
                Output::Table | Output::Dot => {
                    println!(
                        "topology {} submitted: placer {}, {} on {}",
                        shown(v["name"].as_str().unwrap_or("")),
                        shown(v["placer"].as_str().unwrap_or("")),
                        count(v["workers"].as_array().map_or(0, Vec::len) as u64, "worker"),
                        count(v["nodes_used"].as_u64().unwrap_or(0), "node")
                    );
                    if let Some(over) = v["overcommitted"].as_str().filter(|o| !o.is_empty()) {
                        eprintln!("warning: {}", shown(over));
                    }
                    if v["replaced_killed"] == true {
                        println!(
                            "(it replaces the killed topology of this name: that one's record and \
                             counts are gone)"
                        );
                    }
                }
            }
        }
        TopologyCommand::List(a) => {
            let mut api = connect(&a.client).await?;
            let r = api
                .list_topologies(pb::ListTopologiesRequest {})
                .await
                .map_err(refused)?
                .into_inner();
            // The typed statuses; a server from before them sends only the JSON document.
            let v: Value = if r.statuses.is_empty() {
                serde_json::from_str(&r.statuses_json)?
            } else {
                serde_json::to_value(&r.statuses)?
            };
            match a.client.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&v)?),
                Output::Table | Output::Dot => {
                    // Whose each is: a column once a user's topology is listed.
                    let owner = |s: &Value| s["owner"].as_str().unwrap_or("").to_string();
                    let owners = v
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|s| !matches!(owner(s).as_str(), "" | "admin"));
                    let mut header = vec!["name"];
                    if owners {
                        header.push("user");
                    }
                    header.extend([
                        "state",
                        "placer",
                        "nodes",
                        "workers",
                        "generation",
                        "tuples/s",
                        "inter-node t/s",
                    ]);
                    let mut t = table(&header);
                    for s in v.as_array().into_iter().flatten() {
                        let mut row = vec![s["name"].as_str().unwrap_or("").to_string()];
                        if owners {
                            row.push(owner(s));
                        }
                        row.extend([
                            state_of(s),
                            s["placer"].as_str().unwrap_or("").to_string(),
                            s["nodes_used"].to_string(),
                            format!(
                                "{}/{}",
                                s["workers_running"],
                                s["workers"].as_array().map_or(0, Vec::len)
                            ),
                            s["generation"].to_string(),
                            format!(
                                "{:.0}",
                                s["throughput_tuples_per_s"].as_f64().unwrap_or(0.0)
                            ),
                            format!(
                                "{:.0}",
                                s["inter_node_tuples_per_s"].as_f64().unwrap_or(0.0)
                            ),
                        ]);
                        t.add_row(crate::runtime::human::row(row));
                    }
                    println!("{t}");
                }
            }
        }
        TopologyCommand::Show(a) => {
            let mut api = connect(&a.client).await?;
            let r = api
                .show_topology(pb::TopologyName { name: a.name })
                .await
                .map_err(refused)?
                .into_inner();
            print_status(&status_of(&r)?, a.client.output)?;
        }
        TopologyCommand::Log(a) => worker_log(a).await?,
        TopologyCommand::Purge(a) => {
            let mut api = connect(&a.client).await?;
            let r = api
                .purge_topology(pb::TopologyName { name: a.name })
                .await
                .map_err(refused)?
                .into_inner();
            if a.client.output == Output::Json {
                println!("{}", serde_json::json!({ "purged": r.name }));
            } else {
                println!("topology {} purged", shown(&r.name));
            }
        }
        TopologyCommand::Kill(a) => {
            let mut api = connect(&a.client).await?;
            let r = api
                .kill_topology(pb::TopologyName {
                    name: a.name.clone(),
                })
                .await
                .map_err(refused)?
                .into_inner();
            match a.client.output {
                Output::Json => print_status(&status_of(&r)?, Output::Json)?,
                Output::Table | Output::Dot => {
                    if status_of(&r)?["already_killed"] == true {
                        println!("topology {} was killed before: nothing changed", a.name);
                    } else {
                        println!(
                            "topology {} killed: its workers stop at their agents' next sync",
                            a.name
                        );
                    }
                }
            }
        }
        TopologyCommand::Rebalance(a) => {
            let mut api = connect(&a.client).await?;
            let r = api
                .rebalance_topology(pb::TopologyName { name: a.name })
                .await
                .map_err(refused)?
                .into_inner();
            print_status(&status_of(&r)?, a.client.output)?;
        }
    }
    Ok(())
}

/// The status a reply carries: the typed message, or (a server from before it) the JSON
/// document. Both have the same keys, so `--output json` prints the same either way.
fn status_of(r: &pb::TopologyReply) -> anyhow::Result<Value> {
    Ok(match &r.status {
        Some(s) => serde_json::to_value(s)?,
        None => serde_json::from_str(&r.status_json)?,
    })
}

/// A topology's state as the tables say it: `running`, `killed`, or `running, degraded:
/// split#1 given up` while executors its workers gave up on pass no tuple.
fn state_of(s: &Value) -> String {
    let state = s["state"].as_str().unwrap_or("");
    if s["degraded"].as_bool() != Some(true) {
        return state.to_string();
    }
    let given_up: Vec<&str> = s["executors_given_up"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    format!("{state}, degraded: {} given up", given_up.join(" "))
}

fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.iter().copied());
    t
}

fn print_status(v: &Value, output: Output) -> anyhow::Result<()> {
    if output == Output::Json {
        println!("{}", serde_json::to_string_pretty(v)?);
        return Ok(());
    }
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    println!(
        "topology {} ({}): placer {}, generation {}, {} used of {} alive, {}/{} workers running",
        shown(v["name"].as_str().unwrap_or("")),
        shown(&state_of(v)),
        shown(v["placer"].as_str().unwrap_or("")),
        v["generation"],
        count(v["nodes_used"].as_u64().unwrap_or(0), "node"),
        v["nodes_alive"],
        v["workers_running"],
        v["workers"].as_array().map_or(0, Vec::len),
    );
    let requires: Vec<&str> = v["requires"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !requires.is_empty() {
        println!("on nodes with {}", shown(&requires.join(", ")));
    }
    if let Some(over) = v["overcommitted"].as_str().filter(|o| !o.is_empty()) {
        println!("warning: {}", shown(over));
    }
    println!(
        "throughput {:.0} tuples/s from spouts; inter-node {:.0} tuples/s, inter-process {:.0} tuples/s (last {:.1} s); latency p50 {} µs, p99 {} µs",
        f("throughput_tuples_per_s"),
        f("inter_node_tuples_per_s"),
        f("inter_process_tuples_per_s"),
        f("window_s"),
        v["latency_p50_us"],
        v["latency_p99_us"],
    );
    let mut w = table(&[
        "worker",
        "node",
        "process",
        "address",
        "pid",
        "links",
        "refused",
        "executors",
    ]);
    for x in v["workers"].as_array().into_iter().flatten() {
        w.add_row(crate::runtime::human::row(vec![
            x["worker"].to_string(),
            x["node"].as_str().unwrap_or("").to_string(),
            x["process"].to_string(),
            x["addr"].as_str().unwrap_or("-").to_string(),
            x["pid"].as_u64().map_or("-".into(), |p| p.to_string()),
            match x["encrypted"].as_bool() {
                Some(true) => "tls".into(),
                Some(false) => "tcp".into(),
                None => "-".into(),
            },
            x["refused_connections"]
                .as_u64()
                .map_or("-".into(), |n| n.to_string()),
            x["executors"].as_array().map_or(String::new(), |a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        ]));
    }
    println!("{w}");
    for x in v["workers"].as_array().into_iter().flatten() {
        if let Some(why) = x["start_error"].as_str() {
            println!(
                "worker {} cannot start on {}: {}",
                x["worker"],
                shown(x["node"].as_str().unwrap_or("?")),
                shown(why)
            );
        }
    }
    let mut e = table(&[
        "executor",
        "node",
        "received/s",
        "emitted/s",
        "cpu %",
        "unacked",
        "expired",
        "restarts",
        "state",
    ]);
    let figure = |x: &Value, k: &str| x[k].as_u64().map_or("-".into(), |n| n.to_string());
    for x in v["executors"].as_array().into_iter().flatten() {
        e.add_row(crate::runtime::human::row(vec![
            x["executor"].as_str().unwrap_or("").to_string(),
            x["node"].as_str().unwrap_or("-").to_string(),
            format!("{:.0}", x["received_per_s"].as_f64().unwrap_or(0.0)),
            format!("{:.0}", x["emitted_per_s"].as_f64().unwrap_or(0.0)),
            format!("{:.1}", x["cpu_percent"].as_f64().unwrap_or(0.0)),
            figure(x, "unacked"),
            figure(x, "expired"),
            figure(x, "restarts"),
            // A multi-lang executor whose program the worker gave up starting again.
            if x["gave_up"].as_bool() == Some(true) {
                "failed".into()
            } else {
                "-".into()
            },
        ]));
    }
    println!("{e}");
    // Why a program ended: the worker's sentence, too long for a table cell.
    for x in v["executors"].as_array().into_iter().flatten() {
        if let Some(why) = x["ended"].as_str() {
            println!(
                "{} {}: {}",
                shown(x["executor"].as_str().unwrap_or("?")),
                if x["gave_up"].as_bool() == Some(true) {
                    "failed for good"
                } else {
                    "program last ended"
                },
                shown(why)
            );
        }
    }
    let mut n = table(&["node", "measured cpu %", "model load %"]);
    for x in v["node_loads"].as_array().into_iter().flatten() {
        n.add_row(crate::runtime::human::row(vec![
            x["node"].as_str().unwrap_or("").to_string(),
            format!("{:.1}", x["cpu_percent"].as_f64().unwrap_or(0.0)),
            format!("{:.1}", x["model_load_percent"].as_f64().unwrap_or(0.0)),
        ]));
    }
    println!("{n}");
    let mut t = table(&["from", "to", "tuples/s"]);
    for x in v["traffic"].as_array().into_iter().flatten() {
        t.add_row(crate::runtime::human::row(vec![
            x["from"].as_str().unwrap_or("").to_string(),
            x["to"].as_str().unwrap_or("").to_string(),
            format!("{:.0}", x["tuples_per_s"].as_f64().unwrap_or(0.0)),
        ]));
    }
    println!("{t}");
    let rs = v["reschedules"].as_array().cloned().unwrap_or_default();
    if rs.is_empty() {
        println!("no reschedule");
    }
    for r in rs {
        println!(
            "reschedule → generation {}: cause {}, gain {:.1} %, {}",
            r["generation"],
            shown(r["cause"].as_str().unwrap_or("")),
            r["gain"].as_f64().unwrap_or(0.0) * 100.0,
            count(r["nodes"].as_u64().unwrap_or(0), "node")
        );
    }
    Ok(())
}

/// Runs the hidden `stream-worker` command.
pub fn run_worker(args: StreamWorkerArgs) -> anyhow::Result<()> {
    // The worker's stderr is its `worker.err` (the agent's): why an executor's program was
    // killed or exited, refused connections, the programs' `log` messages and the stderr
    // budget's notices are logged through `tracing`, so without a subscriber they were lost.
    crate::runtime::logging::init("info", Default::default(), None);
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let config: hetsched_stream::WorkerConfig = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a worker configuration", args.config.display()))?;
    hetsched_stream::process::run_process(config, args.report_every)?;
    Ok(())
}
