//! `hetsched bench-dispatch`: dispatch throughput of the real system. Starts `hetsched server` and
//! `--agents` (default two) `hetsched agent` processes on loopback (this same binary), submits one job of N tasks that
//! run `true` (or `--command`), and measures from submission to the last recorded success; reports tasks/s and the
//! server's peak resident memory (`VmHWM` of `/proc/PID/status`).

use super::client::connect_with;
use anyhow::{Context, bail};
use clap::Args;
use hetsched_proto as pb;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `hetsched bench-dispatch`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Number of tasks, all in one job: 1 to 10,000,000 (a job file's bound).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub tasks: u32,
    /// Number of agents, each its own `hetsched agent` process on this machine (named
    /// `bench-0`, `bench-1`, …), all registered before the job is submitted: 1 to 64. The
    /// documented figures use the default, 2 (docs/performance.md, Runtime).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub agents: u32,
    /// Task slots (declared cores) per agent: 1 to 1024.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub slots: u32,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Agents acknowledge each task as succeeded without starting a process: the scheduler's
    /// own ceiling (server, store, heartbeats), apart from process start-up.
    #[arg(long)]
    pub scheduler_only: bool,
    /// Pause between two `GetJob` calls (milliseconds). Each call is held by the server until
    /// the job ends or a second passes (`wait_ms`), so the end is seen as it happens and the
    /// server answers about one call a second; before `wait_ms` existed this was a polling
    /// period, and each poll added to the server CPU measured.
    #[arg(long, default_value_t = 25)]
    pub poll_ms: u64,
    /// Tasks the server may hand each agent beyond its free cores (the server's `prefetch`
    /// setting): `auto` (the server's default: short tasks only, sized from their measured run
    /// times), or N cores' worth (0 = none). The agent queues them and starts each as a slot
    /// frees, and one heartbeat carries many results and assignments.
    #[arg(long, default_value = "auto", value_parser = prefetch_setting)]
    pub prefetch: String,
    /// What each task runs, split at spaces (e.g. `--command "sleep 1"` to check that long
    /// tasks keep their makespan under `--prefetch auto`).
    #[arg(long, default_value = "true")]
    pub command: String,
}

/// `--prefetch`: `auto` or a number of cores, written as the server's TOML value.
fn prefetch_setting(s: &str) -> Result<String, String> {
    if s == "auto" {
        return Ok("\"auto\"".into());
    }
    s.parse::<u32>()
        .map(|n| n.to_string())
        .map_err(|_| format!("expected `auto` or a number of cores, got `{s}`"))
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// CPU time (user + system) process `pid` has used, in seconds (fields 14 and 15 of
/// `/proc/PID/stat`, in clock ticks of 1/100 s: Linux's USER_HZ).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(11); // field 14 is the 12th after `)`
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// Peak resident set size in KiB of process `pid`.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn wait_for_file(path: &Path, timeout: Duration) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && !s.trim().is_empty()
        {
            return Ok(s.trim().to_string());
        }
        if start.elapsed() > timeout {
            bail!("{} did not appear within {timeout:?}", path.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the benchmark.
/// Most agents `--agents` starts: each is a process on this one machine.
pub const MAX_AGENTS: u32 = 64;
/// Most slots `--slots` gives an agent.
pub const MAX_SLOTS: u32 = 1024;

/// Refuses counts out of their bounds before anything starts, naming the flag: `--agents 0`
/// would otherwise wait for a job no agent runs.
fn check(args: &BenchArgs) -> anyhow::Result<()> {
    let max_tasks = hetsched_core::input::workload::MAX_WORKLOAD_TASKS;
    for (flag, n, max) in [
        ("--tasks", args.tasks, max_tasks),
        ("--agents", args.agents, u64::from(MAX_AGENTS)),
        ("--slots", args.slots, u64::from(MAX_SLOTS)),
    ] {
        if n == 0 || u64::from(n) > max {
            bail!("{flag} must be 1 to {max}, got {n}");
        }
    }
    Ok(())
}

pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    check(args)?;
    let exe = std::env::current_exe().context("locating the hetsched binary")?;
    let dir = super::scratch::dir("hetsched-bench")
        .context("creating the benchmark's directory in the temporary directory")?;
    let mut children = Children(Vec::new());
    let log = |name: &str| -> anyhow::Result<Stdio> {
        Ok(Stdio::from(std::fs::File::create(
            dir.join(format!("{name}.log")),
        )?))
    };
    let config = dir.join("server.toml");
    std::fs::write(&config, format!("prefetch = {}\n", args.prefetch))?;
    let server = std::process::Command::new(&exe)
        .arg("server")
        .arg("--config")
        .arg(&config)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--heartbeat-interval",
            "200ms",
            "--data-dir",
        ])
        .arg(dir.join("server"))
        .stdout(Stdio::null())
        .stderr(log("server")?)
        .env("RUST_LOG", "warn")
        .spawn()?;
    let server_pid = server.id();
    children.0.push(server);
    let addr = wait_for_file(&dir.join("server/address"), Duration::from_secs(30))?;
    let token_file = dir.join("server/token");
    let agent_token_file = dir.join("server/agent-token");
    let url = format!("http://{addr}");
    for i in 0..args.agents {
        let agent = std::process::Command::new(&exe)
            .args(["agent", "--server", &url, "--name", &format!("bench-{i}")])
            .arg("--cores")
            .arg(args.slots.to_string())
            .arg("--token-file")
            .arg(&agent_token_file)
            .arg("--work-dir")
            .arg(dir.join(format!("agent-{i}")))
            .args(args.scheduler_only.then_some("--no-exec"))
            .stdout(Stdio::null())
            .stderr(log(&format!("agent-{i}"))?)
            .env("RUST_LOG", "warn")
            .spawn()?;
        children.0.push(agent);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (elapsed, job, server_cpu) = rt.block_on(async {
        let token = std::fs::read_to_string(&token_file)?;
        let mut api = connect_with(&url, token.trim(), None).await?;
        let start = Instant::now();
        while api
            .list_nodes(pb::ListNodesRequest::default())
            .await?
            .into_inner()
            .nodes
            .len()
            < args.agents as usize
        {
            if start.elapsed() > Duration::from_secs(30) {
                bail!("agents did not register within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let argv: Vec<String> = args
            .command
            .split_whitespace()
            .map(|a| format!("{a:?}"))
            .collect();
        if argv.is_empty() {
            bail!("--command is empty");
        }
        let text = format!(
            "[[application]]\nname = \"bench\"\ntasks = {}\n[application.cpu]\ncommand = [{}]\n",
            args.tasks,
            argv.join(", ")
        );
        let start = Instant::now();
        let cpu_before = cpu_seconds(server_pid).unwrap_or(0.0);
        let reply = api
            .submit(pb::SubmitRequest {
                origin: "bench.toml".into(),
                text,
                workdir: dir.display().to_string(),
                ..Default::default()
            })
            .await?
            .into_inner();
        loop {
            // Held by the server until the job ends (or a second passes): the end is seen as
            // it happens, as `hq submit --wait` sees it.
            let j = api
                .get_job(pb::GetJobRequest {
                    job_id: reply.job_id,
                    wait_ms: 1000,
                })
                .await?
                .into_inner();
            if super::client::is_final(&j.state) {
                let cpu = cpu_seconds(server_pid).unwrap_or(0.0) - cpu_before;
                return Ok::<_, anyhow::Error>((start.elapsed(), j, cpu));
            }
            if start.elapsed() > Duration::from_secs(600) {
                bail!("not finished after 600 s");
            }
            tokio::time::sleep(Duration::from_millis(args.poll_ms.max(1))).await;
        }
    })?;
    let hwm = vm_hwm_kib(server_pid);
    let agent_hwm: Vec<Option<u64>> = children.0[1..].iter().map(|c| vm_hwm_kib(c.id())).collect();
    drop(children);
    let ok = job.counts.as_ref().map_or(0, |c| c.succeeded);
    let rate = ok as f64 / elapsed.as_secs_f64();
    if args.json {
        println!(
            "{{\"tasks\":{},\"succeeded\":{ok},\"agents\":{},\"slots\":{},\"scheduler_only\":{},\"prefetch\":{},\"seconds\":{:.3},\"tasks_per_sec\":{rate:.0},\"server_cpu_seconds\":{server_cpu:.2},\"server_vmhwm_kib\":{}}}",
            args.tasks,
            args.agents,
            args.slots,
            args.scheduler_only,
            args.prefetch,
            elapsed.as_secs_f64(),
            hwm.unwrap_or(0)
        );
    } else {
        println!(
            "{} `{}` tasks ({ok} succeeded) through 1 server and {} agents × {} slots on loopback{}",
            args.tasks,
            args.command,
            args.agents,
            args.slots,
            if args.scheduler_only {
                " (scheduler only: no processes started)"
            } else {
                ""
            }
        );
        println!(
            "  {:.3} s from submission to the last success: {rate:.0} tasks/s",
            elapsed.as_secs_f64()
        );
        println!(
            "  server CPU (user + system) from submission to the end: {server_cpu:.2} s ({:.1} ms per 1000 tasks)",
            server_cpu * 1e6 / args.tasks.max(1) as f64
        );
        let agents: Vec<String> = agent_hwm
            .iter()
            .map(|k| k.map_or("?".into(), |k| k.to_string()))
            .collect();
        println!(
            "  server peak RSS (VmHWM): {} KiB; agents: {} KiB",
            hwm.map_or("?".into(), |k| k.to_string()),
            agents.join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    if ok != args.tasks as u64 {
        bail!("only {ok} of {} tasks succeeded", args.tasks);
    }
    Ok(())
}
