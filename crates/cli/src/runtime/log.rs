//! `hetsched log JOB TASK`: a task's captured stdout (or stderr) — or a divisible job's chunk's —
//! read from the agent that ran it through the server, page by page; `--follow` keeps reading
//! while the task runs. Also the failing tasks' (or chunks') last stderr lines that
//! `submit --wait` and `wait` print.

use super::ClientArgs;
use super::client::{Api, connect, refused};
use super::human::shown;
use hetsched_proto as pb;
use std::io::Write;
use std::time::Duration;

/// Bytes asked for per page.
const PAGE: u32 = 256 << 10;

/// How often `--follow` asks for more.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// `hetsched log`.
pub async fn log(
    args: &ClientArgs,
    job: u64,
    task: &str,
    stderr: bool,
    attempt: Option<u32>,
    follow: bool,
) -> anyhow::Result<()> {
    let mut api = connect(args).await?;
    let mut offset = 0i64;
    let mut announced = false;
    // Said once that the task has not started yet.
    let mut waiting = false;
    // The attempt followed: the one asked for, else the latest when the first page is read.
    let mut pinned = attempt;
    let out = std::io::stdout();
    let mut out = out.lock();
    loop {
        let page = api
            .read_log(pb::ReadLogRequest {
                job_id: job,
                task: task.to_string(),
                stderr,
                attempt: pinned.unwrap_or(0),
                offset,
                limit: PAGE,
                follow,
            })
            .await
            .map_err(read_refused)?
            .into_inner();
        // Attempts count from 1: 0 is a task that has not started yet (only a follower is told
        // so rather than refused), which it waits for, `tail -F` fashion, as `submit … && log
        // last APP:0 --follow` expects however soon the task runs.
        if page.attempt == 0 && !page.divisible_chunk {
            if !waiting {
                waiting = true;
                // Named as the user named it too, when that was not its id.
                let named = if task.contains(':') {
                    format!("task {} ({task})", page.task_id)
                } else {
                    format!("task {}", page.task_id)
                };
                eprintln!(
                    "{named} has not started yet ({}): waiting for it",
                    shown(&page.task_state)
                );
            }
            tokio::time::sleep(FOLLOW_EVERY).await;
            continue;
        }
        pinned.get_or_insert(page.attempt);
        if !announced {
            announced = true;
            if !page.exists && !follow {
                let stream = if stderr { "stderr" } else { "stdout" };
                if page.divisible_chunk {
                    eprintln!(
                        "chunk {} ({}, on {}) printed nothing on {stream}",
                        page.task_id,
                        shown(&page.task_state),
                        shown(&page.node)
                    );
                } else if page.node.is_empty() {
                    // An earlier attempt, found on no live agent (where it ran is not recorded).
                    eprintln!(
                        "task {} (attempt {} of {}): no live agent holds its {stream}: it printed \
                         nothing there, or the node that ran it is dead or unreachable now",
                        page.task_id, page.attempt, page.latest_attempt
                    );
                } else {
                    eprintln!(
                        "task {} (attempt {}, on {}) printed nothing on {stream}",
                        page.task_id,
                        page.attempt,
                        shown(&page.node)
                    );
                }
            }
        }
        // The task's own output, as it wrote it (like `cat`): not escaped, unlike the server's
        // names and messages around it.
        out.write_all(&page.data)?;
        out.flush()?;
        offset = (page.offset + page.data.len() as u64) as i64;
        if !page.data.is_empty() && (offset as u64) < page.size {
            continue; // more pages now
        }
        // The state was read before this page: if the attempt had ended then, the file is
        // complete and has been read to its end.
        if !follow || page.task_state != "running" || page.latest_attempt != page.attempt {
            break;
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
    Ok(())
}

/// A refused read as users read it. The server's `Unavailable` that names a node (`node `a`:
/// …`: its agent did not answer, or holds no data key to check the server's log ticket with
/// yet) is the server's own word about that agent: printed as it is, not as "the server is
/// unavailable" (a transport's `Unavailable` never starts so).
fn read_refused(s: tonic::Status) -> anyhow::Error {
    if s.code() == tonic::Code::Unavailable && s.message().starts_with("node `") {
        return anyhow::anyhow!("{}", shown(s.message()));
    }
    refused(s)
}

/// Lines kept from the end of each failing task's stderr.
const TAIL_LINES: usize = 10;
/// Failing tasks shown.
const TAIL_TASKS: usize = 5;

/// Prints the last stderr lines of a finished job's failed tasks (at most [`TAIL_TASKS`]) — of
/// a divisible job, its failure and its failed chunks' — to stderr; problems reading them are
/// reported in one line and do not change the outcome.
pub async fn print_failures(api: &mut Api, job: &pb::JobInfo) {
    if let Some(d) = &job.divisible {
        print_chunk_failures(api, job.id, d).await;
        return;
    }
    let job = job.id;
    let mut cursor = 0;
    let mut failed = Vec::new();
    let mut total_failed = 0u64;
    loop {
        let Ok(page) = api
            .list_tasks(pb::ListTasksRequest {
                job_id: job,
                cursor,
                limit: 1000,
                // The store finds them; the loop below still checks each task's state.
                states: vec!["failed".into()],
                ..Default::default()
            })
            .await
        else {
            return;
        };
        let page = page.into_inner();
        for t in page.tasks {
            if t.state == "failed" {
                total_failed += 1;
                if failed.len() < TAIL_TASKS {
                    failed.push(t);
                }
            }
        }
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    for t in &failed {
        // A task failed without running (a failed dependency, no node to hold it) has no node.
        let on = if t.node.is_empty() {
            String::new()
        } else {
            format!(" on {}", shown(&t.node))
        };
        eprintln!(
            "task {} ({}:{}) failed{on}: {}",
            t.id,
            shown(&t.app),
            t.index,
            shown(&t.message)
        );
        if t.attempt > 0 {
            print_stderr_tail(api, job, &t.id.to_string()).await;
        }
    }
    if total_failed > failed.len() as u64 {
        eprintln!(
            "… and {} more failed: `hetsched tasks --job {job}`",
            hetsched_core::text::count(total_failed - failed.len() as u64, "task")
        );
    }
}

/// A job that ended cancelled without a failure: why, as its first cancelled task says it —
/// `cancelled: job 50, which this job runs after, ended failed` (Slurm's
/// `DependencyNeverSatisfied`), `cancelled by the admin` — so a `wait` that ends so names the
/// cause rather than only the count. A divisible job's cancel is said by its own line.
pub async fn print_cancel_cause(api: &mut Api, job: &pb::JobInfo) {
    if job.divisible.is_some() || job.state != "cancelled" {
        return;
    }
    let Ok(page) = api
        .list_tasks(pb::ListTasksRequest {
            job_id: job.id,
            limit: 1,
            states: vec!["cancelled".into()],
            ..Default::default()
        })
        .await
    else {
        return;
    };
    if let Some(t) = page.into_inner().tasks.first()
        && t.state == "cancelled"
        && !t.message.is_empty()
    {
        eprintln!("job {} {}", job.id, shown(&t.message));
    }
}

/// A failed divisible job: why, then the last stderr lines of its failed chunks (the latest
/// [`TAIL_TASKS`]; a failed chunk's units went out again as new chunks until the retries ran out).
async fn print_chunk_failures(api: &mut Api, job: u64, d: &pb::DivisibleInfo) {
    if !d.message.is_empty() {
        eprintln!("job {job} failed: {}", shown(&d.message));
    }
    let failed: Vec<&pb::DivisibleChunk> =
        d.chunks.iter().filter(|c| c.state == "failed").collect();
    let latest = &failed[failed.len().saturating_sub(TAIL_TASKS)..];
    for c in latest {
        eprintln!(
            "chunk {} (units {}..{}) failed on {}",
            c.chunk,
            c.start,
            c.end,
            shown(&c.worker)
        );
        print_stderr_tail(api, job, &c.chunk.to_string()).await;
    }
    if failed.len() > latest.len() {
        eprintln!(
            "… and {} more failed: `hetsched job {job} --output json`",
            hetsched_core::text::count((failed.len() - latest.len()) as u64, "chunk")
        );
    }
}

/// Tasks whose first page `log --all` reads ahead of the one it prints.
const AHEAD: usize = 8;

/// `hetsched log JOB --all`: the output of every task of `job` that ran (in `states`, if any), in
/// task order, each task's latest attempt; with `header`, a line naming each task first. The
/// first pages of the next [`AHEAD`] tasks are read while one is printed. A task whose output
/// cannot be read is named on stderr and the others still print; the command then fails.
pub async fn log_all(
    args: &ClientArgs,
    job: u64,
    stderr: bool,
    states: Vec<String>,
    header: bool,
) -> anyhow::Result<()> {
    let mut api = connect(args).await?;
    let info = api
        .get_job(pb::GetJobRequest {
            job_id: job,
            ..Default::default()
        })
        .await
        .map_err(refused)?
        .into_inner();
    if info.divisible.is_some() {
        anyhow::bail!(
            "job {job} is a divisible job: `hetsched output {job}` gathers its output, and \
             `hetsched log {job} CHUNK` prints one chunk's"
        );
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut cursor = 0u64;
    let mut unread = 0u64;
    let first_page = |api: &Api, t: &pb::TaskInfo| {
        let mut api = api.clone();
        let req = pb::ReadLogRequest {
            job_id: job,
            task: t.id.to_string(),
            stderr,
            attempt: t.attempt,
            offset: 0,
            limit: PAGE,
            follow: false,
        };
        tokio::spawn(async move { api.read_log(req).await.map(tonic::Response::into_inner) })
    };
    loop {
        let page = api
            .list_tasks(pb::ListTasksRequest {
                job_id: job,
                cursor,
                limit: 1000,
                states: states.clone(),
                ..Default::default()
            })
            .await
            .map_err(refused)?
            .into_inner();
        let mut ahead = std::collections::VecDeque::new();
        let mut ran = page.tasks.into_iter().filter(|t| t.attempt > 0);
        loop {
            while ahead.len() < AHEAD {
                let Some(t) = ran.next() else { break };
                let read = first_page(&api, &t);
                ahead.push_back((t, read));
            }
            let Some((t, read)) = ahead.pop_front() else {
                break;
            };
            let named = format!(
                "task {} ({}:{}, {} on {})",
                t.id,
                shown(&t.app),
                t.index,
                shown(&t.state),
                shown(&t.node)
            );
            let first = match read.await {
                Ok(Ok(p)) => p,
                Ok(Err(s)) => {
                    unread += 1;
                    eprintln!("{named}: {}", shown(s.message()));
                    continue;
                }
                Err(e) => {
                    unread += 1;
                    eprintln!("{named}: {e}");
                    continue;
                }
            };
            if header {
                writeln!(out, "==> {named} <==")?;
            }
            // The task's own output, not escaped (like `cat`; `named` is).
            out.write_all(&first.data)?;
            // The rest of a long output, page by page.
            let mut offset = first.offset + first.data.len() as u64;
            let mut size = first.size;
            while offset < size {
                let p = match api
                    .read_log(pb::ReadLogRequest {
                        job_id: job,
                        task: t.id.to_string(),
                        stderr,
                        attempt: first.attempt,
                        offset: offset as i64,
                        limit: PAGE,
                        follow: false,
                    })
                    .await
                {
                    Ok(p) => p.into_inner(),
                    Err(s) => {
                        unread += 1;
                        eprintln!(
                            "{named}: the rest of its output from byte {offset}: {}",
                            shown(s.message())
                        );
                        break;
                    }
                };
                if p.data.is_empty() {
                    break;
                }
                out.write_all(&p.data)?;
                offset = p.offset + p.data.len() as u64;
                size = p.size;
            }
            out.flush()?;
        }
        if page.next_cursor == 0 {
            break;
        }
        cursor = page.next_cursor;
    }
    if unread > 0 {
        anyhow::bail!(
            "the output of {} of job {job} could not be read (named above)",
            hetsched_core::text::count(unread, "task")
        );
    }
    Ok(())
}

/// Prints the last [`TAIL_LINES`] lines of the stderr of `task` (a task id, or a divisible
/// job's chunk number) of `job`, indented.
async fn print_stderr_tail(api: &mut Api, job: u64, task: &str) {
    match api
        .read_log(pb::ReadLogRequest {
            job_id: job,
            task: task.to_string(),
            stderr: true,
            attempt: 0,
            offset: -4096,
            limit: 4096,
            follow: false,
        })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            if !r.exists || r.data.is_empty() {
                eprintln!("  (no stderr)");
                return;
            }
            let text = String::from_utf8_lossy(&r.data);
            let lines: Vec<&str> = text.lines().collect();
            let skip = lines.len().saturating_sub(TAIL_LINES);
            if skip > 0 || r.offset > 0 {
                eprintln!("  … (`hetsched log {job} {task} --stderr` shows all)");
            }
            // An excerpt inside this report, escaped as every text it shows is: a task's
            // terminal escape (an OSC title or clipboard write, a cursor move over the lines
            // above) must not act on the user's terminal. `hetsched log` gives the bytes as
            // they are.
            for l in &lines[skip..] {
                eprintln!("  | {}", shown(l));
            }
        }
        Err(s) => eprintln!("  (stderr not available: {})", shown(s.message())),
    }
}
