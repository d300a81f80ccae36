//! `hetsched agent --time-limit auto`: the time left in the batch allocation (a Slurm or PBS job)
//! the agent runs in, asked of the batch system itself, so a job script need not repeat its
//! own `--time`. The agent's time limit is that time less [`MARGIN`], for the agent to hand its
//! last results to the server before the batch system ends the allocation.

use anyhow::{Context, bail};
use std::process::Command;
use std::time::Duration;

/// What `auto` keeps back from the allocation's time left: the server's own figure, as it
/// counts it out of its allocations' time when it decides which tasks a queue's agents could
/// run (`QueueConfig::time_for_tasks`); two copies could drift apart, and a queue would then
/// allocate for tasks its agents never take.
pub const MARGIN: Duration = hetsched_server::allocation::AUTO_MARGIN;

/// The agent's time limit under `--time-limit auto`: the allocation's time left less
/// [`MARGIN`]; `None` when the batch system says the job has no limit.
pub fn auto_time_limit() -> anyhow::Result<Option<Duration>> {
    let Some(left) = time_left()? else {
        return Ok(None);
    };
    limit_from(left).map(Some)
}

/// The agent's time limit when the allocation has `left`.
fn limit_from(left: Duration) -> anyhow::Result<Duration> {
    match left.checked_sub(MARGIN) {
        Some(limit) if !limit.is_zero() => Ok(limit),
        _ => bail!(
            "--time-limit auto: the allocation has {} left, not more than the {} margin kept \
             for the agent's last report",
            humantime::format_duration(left),
            humantime::format_duration(MARGIN)
        ),
    }
}

/// The time left in the allocation this process runs in, from `squeue` (Slurm: `SLURM_JOB_ID`)
/// or `qstat` (PBS: `PBS_JOBID`); `None`: no limit.
fn time_left() -> anyhow::Result<Option<Duration>> {
    if let Ok(job) = std::env::var("SLURM_JOB_ID") {
        let out = run("squeue", &["--noheader", "--jobs", &job, "--format", "%L"])?;
        let line = out
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("");
        return slurm_time_left(line).with_context(|| {
            format!("--time-limit auto: `squeue` on Slurm job {job} said `{line}`")
        });
    }
    if let Ok(job) = std::env::var("PBS_JOBID") {
        let out = run("qstat", &["-f", &job])?;
        return pbs_time_left(&out)
            .map(Some)
            .with_context(|| format!("--time-limit auto: `qstat -f {job}`"));
    }
    bail!(
        "--time-limit auto: not inside a batch allocation (neither SLURM_JOB_ID nor PBS_JOBID is \
         set); give the agent's time limit as a duration (`--time-limit 11h50m`)"
    )
}

fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("--time-limit auto: running `{program}`"))?;
    if !out.status.success() {
        bail!(
            "--time-limit auto: `{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Slurm's `%L` (time left): `[DAYS-][[HOURS:]MINUTES:]SECONDS`, or `UNLIMITED` (`None`).
fn slurm_time_left(s: &str) -> anyhow::Result<Option<Duration>> {
    if s == "UNLIMITED" {
        return Ok(None);
    }
    let (days, clock) = match s.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().context("days")?, rest),
        None => (0, s),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    if parts.is_empty() || parts.len() > 3 || (days > 0 && parts.len() != 3) {
        bail!("expected [DAYS-][[HOURS:]MINUTES:]SECONDS or UNLIMITED");
    }
    let mut secs = 0u64;
    for p in &parts {
        let v: u64 = p
            .parse()
            .context("expected [DAYS-][[HOURS:]MINUTES:]SECONDS or UNLIMITED")?;
        secs = secs * 60 + v;
    }
    Ok(Some(Duration::from_secs(days * 86_400 + secs)))
}

/// From `qstat -f`: `Resource_List.walltime` less `resources_used.walltime` (not there before
/// the job has run a moment: nothing used).
fn pbs_time_left(text: &str) -> anyhow::Result<Duration> {
    let field = |name: &str| {
        text.lines()
            .filter_map(|l| l.trim().split_once('='))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim().to_string())
    };
    let limit = field("Resource_List.walltime").context("no Resource_List.walltime")?;
    let limit = hms(&limit).with_context(|| format!("Resource_List.walltime `{limit}`"))?;
    let used = match field("resources_used.walltime") {
        Some(u) => hms(&u).with_context(|| format!("resources_used.walltime `{u}`"))?,
        None => Duration::ZERO,
    };
    Ok(limit.saturating_sub(used))
}

/// `HOURS:MINUTES:SECONDS` (PBS's walltime).
fn hms(s: &str) -> anyhow::Result<Duration> {
    let parts: Vec<u64> = s
        .split(':')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("expected HOURS:MINUTES:SECONDS")?;
    match parts[..] {
        [h, m, sec] => Ok(Duration::from_secs(h * 3600 + m * 60 + sec)),
        _ => bail!("expected HOURS:MINUTES:SECONDS"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_time_left_reads_every_form_squeue_prints() {
        let s = |t: &str| slurm_time_left(t).expect(t).map(|d| d.as_secs());
        assert_eq!(s("45"), Some(45));
        assert_eq!(s("5:07"), Some(307));
        assert_eq!(s("11:50:00"), Some(42_600));
        assert_eq!(s("1-02:03:04"), Some(93_784));
        assert_eq!(s("UNLIMITED"), None);
        for bad in ["", "NOT_SET", "INVALID", "1-05:00", "1:2:3:4", "-5"] {
            assert!(slurm_time_left(bad).is_err(), "{bad}");
        }
    }

    /// What the server counts on an allocation's agents having for tasks
    /// (`QueueConfig::time_for_tasks`) is what an agent of it has: started within the server's
    /// allowance after the allocation did, its time limit less the kill grace the server gives
    /// it is never shorter. The kill grace the script passes is one the agent accepts.
    #[test]
    fn an_agent_of_an_allocation_has_the_time_the_server_counts_on() {
        use hetsched_server::allocation::{AGENT_KILL_GRACE, START_ALLOWANCE};
        assert!(AGENT_KILL_GRACE <= hetsched_agent::launch::MAX_KILL_GRACE);
        for limit in ["2m 40s", "10m", "1h", "12h", "7days"] {
            let q: hetsched_server::allocation::QueueConfig = toml::from_str(&format!(
                "name = \"q\"\nmanager = \"slurm\"\ntime_limit = \"{limit}\"\n"
            ))
            .expect(limit);
            let wall: Duration = limit.parse::<humantime::Duration>().expect(limit).into();
            for started_after in [Duration::ZERO, START_ALLOWANCE] {
                let agent = limit_from(wall - started_after).expect(limit);
                let for_tasks = agent.checked_sub(AGENT_KILL_GRACE).expect(limit);
                assert!(
                    for_tasks >= q.time_for_tasks(),
                    "{limit}, started {started_after:?} late: the agent has {for_tasks:?}, \
                     the server counts on {:?}",
                    q.time_for_tasks()
                );
            }
        }
    }

    #[test]
    fn pbs_time_left_is_the_walltime_less_what_was_used() {
        let text = "Job Id: 42.pbs\n    Job_Name = agents\n    resources_used.walltime = 00:10:30\n    \
                    Resource_List.walltime = 02:00:00\n";
        assert_eq!(pbs_time_left(text).expect("read").as_secs(), 7200 - 630);
        let fresh = "Job Id: 43.pbs\n    Resource_List.walltime = 01:00:00\n";
        assert_eq!(pbs_time_left(fresh).expect("read").as_secs(), 3600);
        assert!(pbs_time_left("Job Id: 44.pbs\n").is_err(), "no walltime");
        assert!(pbs_time_left("    Resource_List.walltime = soon\n").is_err());
    }
}
