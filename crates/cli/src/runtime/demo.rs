//! `hetsched demo`: a whole cluster in one process on loopback — a server and three agents (one
//! declares a GPU) — running a small mixed workload of real programs: dense LU, QR and Cholesky
//! solves (`hetsched kernel`, faer), sized to about a second each, with CPU and GPU variants. On a
//! machine without GPUs the "GPU" variant runs the same CPU kernel with `CUDA_VISIBLE_DEVICES` set
//! (the task's output says so). The three nodes form one rack: the GPU node is its ANode and
//! the two CPU nodes are bound to it, so GPU tasks placed on them are offloaded to it (spec 01).
//! Prints where each task was placed and ran, and the makespan. Then a divisible job: rows of a
//! matrix product planned by UMRLM from the agents' measured speeds, its gathered output checked
//! against the product computed in one piece. Then a small workflow (split → square → sum)
//! balanced agent to agent by PCDDB, its sum checked ([`super::demo_workflow`]).

use super::Output;
use super::client::{connect_with, print_tasks, wait_on};
use super::kernel::{Kind, solve};
use anyhow::Context;
use clap::Args;
use hetsched_core::policy::batch::BatchPolicyKind;
use hetsched_proto as pb;
use std::time::Instant;

/// `hetsched demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Tasks per application.
    #[arg(long, default_value_t = 4)]
    pub tasks: u32,
    /// Seconds each task should take (the matrix order is calibrated to it on this machine).
    #[arg(long, default_value_t = 1.0)]
    pub task_secs: f64,
    /// Batch policy.
    #[arg(long, default_value = "hdas")]
    pub policy: BatchPolicyKind,
    /// Keep the data directory (store, token, task outputs) instead of deleting it.
    #[arg(long)]
    pub keep: bool,
}

/// Matrix order for which an LU solve takes about `secs` here (cost grows as n³).
fn calibrate(secs: f64) -> anyhow::Result<usize> {
    let n0 = 400;
    let t = solve(Kind::Lu, n0)?.max(1e-4);
    let n = (n0 as f64 * (secs / t).cbrt()) as usize;
    Ok(n.clamp(100, 6000))
}

fn job_file(exe: &str, tasks: u32, n: usize) -> String {
    let cmd =
        |kind: &str, n: usize| format!("[\"{exe}\", \"kernel\", \"{kind}\", \"--n\", \"{n}\"]");
    // QR costs about twice an LU of the same order, Cholesky about half.
    let (lu, qr, ch) = (n, (n as f64 / 1.26) as usize, (n as f64 * 1.26) as usize);
    format!(
        r#"# hetsched demo: dense solves with faer; profiles are learned from finished tasks.
[[application]]
name = "lu"
tasks = {tasks}
[application.cpu]
command = {lu_cmd}
[application.gpu]
command = {lu_cmd}

[[application]]
name = "qr"
tasks = {tasks}
[application.cpu]
command = {qr_cmd}

[[application]]
name = "cholesky"
tasks = {tasks}
[application.gpu]
command = {ch_cmd}
[application.cpu]
command = {ch_cmd}
"#,
        lu_cmd = cmd("lu", lu),
        qr_cmd = cmd("qr", qr),
        ch_cmd = cmd("cholesky", ch),
    )
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    super::logging::init("warn", Default::default(), None);
    let exe = std::env::current_exe().context("locating the hetsched binary")?;
    let exe = exe.display().to_string();
    println!(
        "calibrating: matrix order for ~{:.1}s solves …",
        args.task_secs
    );
    // A ^C from now on is seen here, not by the default handler: the demo stops its agents and
    // server before it removes their directory.
    let (interrupt, mut interrupted) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = interrupt.send(true);
        }
    });
    let n = tokio::select! {
        n = tokio::task::spawn_blocking(move || calibrate(args.task_secs)) => n??,
        _ = interrupted.changed() => anyhow::bail!("interrupted"),
    };
    let dir = super::scratch::dir("hetsched-demo")
        .context("creating the demo's directory in the temporary directory")?;
    // Removed however the demo ends: done, failed or interrupted (unless `--keep`).
    let _cleanup = DemoDir {
        dir: dir.clone(),
        keep: args.keep,
    };
    run_in(args, exe, n, dir, interrupted).await
}

/// The demo's data directory, removed when the demo ends unless it is to be kept.
struct DemoDir {
    dir: std::path::PathBuf,
    keep: bool,
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        if self.keep {
            println!("data kept in {}", self.dir.display());
            return;
        }
        // A task's process that is still exiting may write into it while it is removed: try
        // again for a moment before saying what was left.
        let mut last = None;
        for _ in 0..20 {
            match std::fs::remove_dir_all(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        if let Some(e) = last {
            eprintln!("could not remove {}: {e}", self.dir.display());
        }
    }
}

/// The demo itself, its data in `dir`: its server and agents are stopped however it ends, a ^C
/// (`interrupted`) included, before [`DemoDir`] removes `dir` (a task or an agent still running
/// would write into it while it goes).
async fn run_in(
    args: DemoArgs,
    exe: String,
    n: usize,
    dir: std::path::PathBuf,
    mut interrupted: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let config = hetsched_server::ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        data_dir: dir.clone(),
        policy: args.policy,
        heartbeat_interval: hetsched_core::input::Duration(100_000_000),
        dead_timeout: hetsched_core::input::Duration(5_000_000_000),
        workflow: Some(super::demo_workflow::server_config()),
        ..Default::default()
    };
    let server = hetsched_server::start(config).await?;
    let url = format!("http://{}", server.addr);
    println!(
        "server on {url} (policy {}), data in {}",
        args.policy,
        dir.display()
    );
    let mut stops = Vec::new();
    let mut agents = Vec::new();
    for (name, gpus) in [("cpu-node-1", 0), ("cpu-node-2", 0), ("gpu-node", 1)] {
        let opts = hetsched_agent::AgentOptions {
            server: url.clone(),
            token: server.agent_token.clone(),
            ca_pem: None,
            name: name.to_string(),
            resources: hetsched_agent::detect::Resources {
                cores: 1,
                memory_bytes: 4 << 30,
                accelerators: (0..gpus)
                    .map(|_| pb::Accelerator {
                        kind: "demo-gpu".into(),
                        memory_bytes: 4 << 30,
                        speed: 1.0,
                    })
                    .collect(),
                device_names: hetsched_agent::launch::unnamed_devices(gpus),
            },
            core_speed: 1.0,
            disk_read_bw: 200e6,
            work_dir: dir.join(name),
            no_exec: false,
            exe: std::env::current_exe().ok(),
            // The demo's agents log to its standard error, as their guards then do.
            log: Default::default(),
            time_limit: None,
            idle_timeout: None,
            run_as_owner: false,
            // The demo's work directories are its own, made new each run.
            stale_keep: None,
            log_listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            log_tls: None,
            drain: false,
            kill_grace: hetsched_agent::launch::DEFAULT_KILL_GRACE,
            processes: Default::default(),
            // One rack: gpu-node is its ANode (with the accelerator service), the two CPU nodes
            // its NNodes, which offload the GPU tasks placed on them (spec 01).
            accel: hetsched_agent::accel::AccelOptions {
                rack: "rack-a".into(),
                listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
                tls: None,
            },
            advertise: None,
            data: Default::default(),
        };
        println!(
            "agent {name}: 1 core{}",
            if gpus > 0 {
                ", 1 declared GPU (demo-gpu; simulated on this machine)"
            } else {
                ""
            }
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        stops.push(tx);
        agents.push(tokio::spawn(hetsched_agent::run(opts, async {
            let _ = rx.await;
        })));
    }
    let outcome = tokio::select! {
        done = jobs(args.tasks, &exe, n, &dir, &url, &server.token) => done,
        _ = interrupted.changed() => Err(anyhow::anyhow!("interrupted")),
    };
    for tx in stops {
        let _ = tx.send(());
    }
    for a in agents {
        let _ = a.await;
    }
    server.stop().await?;
    outcome
}

/// The demo's jobs on the running cluster at `url`: the batch job, then the divisible job and
/// the workflow.
async fn jobs(
    tasks: u32,
    exe: &str,
    n: usize,
    dir: &std::path::Path,
    url: &str,
    token: &str,
) -> anyhow::Result<()> {
    let mut api = connect_with(url, token, None).await?;
    // Let the agents register so the job is checked against real nodes.
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    // … and the two NNodes be bound to gpu-node.
    loop {
        let nodes = api
            .list_nodes(pb::ListNodesRequest::default())
            .await?
            .into_inner()
            .nodes;
        let bound = nodes.iter().filter(|n| !n.bound_to.is_empty()).count();
        if (nodes.len() >= 3 && bound >= 2) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    println!("rack-a: gpu-node is the ANode; cpu-node-1 and cpu-node-2 are bound to it");
    let text = job_file(exe, tasks, n);
    let job_path = dir.join("demo-job.toml");
    std::fs::write(&job_path, &text)?;
    let reply = api
        .submit(pb::SubmitRequest {
            origin: job_path.display().to_string(),
            text,
            workdir: dir.display().to_string(),
            ..Default::default()
        })
        .await?
        .into_inner();
    println!(
        "submitted job {}: lu (CPU+GPU), qr (CPU), cholesky (GPU+CPU), {} each, n ≈ {n}",
        reply.job_id,
        hetsched_core::text::count(u64::from(tasks), "task")
    );
    let waited = wait_on(
        &mut api,
        Output::Table,
        reply.job_id,
        Some(std::time::Duration::from_secs(600)),
        false,
    )
    .await;
    let tasks = api
        .list_tasks(pb::ListTasksRequest {
            job_id: reply.job_id,
            // The demo's job has a few dozen tasks: one page.
            limit: 10_000,
            ..Default::default()
        })
        .await?
        .into_inner()
        .tasks;
    print_tasks(&tasks);
    let job = api
        .get_job(pb::GetJobRequest {
            job_id: reply.job_id,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut per_node: std::collections::BTreeMap<(String, String, String), u32> =
        Default::default();
    for t in &tasks {
        *per_node
            .entry((t.node.clone(), t.variant.clone(), t.executed_node.clone()))
            .or_default() += 1;
    }
    for ((node, variant, executed), count) in per_node {
        let offloaded = if executed != node && !executed.is_empty() {
            format!(" (offloaded to {executed})")
        } else {
            String::new()
        };
        println!(
            "  {node:<12} {variant}: {}{offloaded}",
            hetsched_core::text::count(count as u64, "task")
        );
    }
    println!(
        "  (gpu-node's GPU is declared, not detected: on a machine without one, its GPU tasks run \
         the same CPU kernel with CUDA_VISIBLE_DEVICES set)"
    );
    for a in &job.apps {
        println!(
            "  learned profile of {:<9} cpu {:>10}  gpu {:>10}",
            a.name,
            learned(a.has_cpu, a.mean_cpu_ms),
            learned(a.has_gpu, a.mean_gpu_ms)
        );
    }
    println!(
        "makespan {:.2}s (submission to last task end)",
        job.finished_ns.saturating_sub(job.submitted_ns) as f64 / 1e9
    );
    let divisible = super::divisible::demo(&mut api, url, token, exe, dir).await;
    let workflow = super::demo_workflow::demo(&mut api, dir).await;
    waited.and(divisible).and(workflow)
}

/// A learned mean for the demo's summary: `–` for a variant the application does not have,
/// `not run` for one no task ran with (the server reports no observation as 0).
fn learned(has: bool, mean_ms: f64) -> String {
    if !has {
        "–".into()
    } else if mean_ms > 0.0 {
        format!("{mean_ms:.1} ms")
    } else {
        "not run".into()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_missing_variant_prints_a_dash_and_one_never_run_says_so_not_zero() {
        assert_eq!(super::learned(false, 0.0), "–");
        // The unit goes with a figure only: "not run ms" read as a time.
        assert_eq!(super::learned(true, 12.34), "12.3 ms");
        assert_eq!(super::learned(true, 0.0), "not run");
    }
}
