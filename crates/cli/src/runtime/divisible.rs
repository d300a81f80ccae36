//! The CLI's side of divisible jobs (`[[divisible]]`, docs/divisible.md "In the runtime"):
//! `hetsched submit` reads the section's `input` file and sends its bytes with the job;
//! `hetsched job N` shows the rounds, per-agent chunk sizes, measured speeds and the lower bound;
//! `hetsched output N [-o FILE]` fetches the gathered output of a completed job.

use super::ClientArgs;
use super::human::shown;
use anyhow::Context;
use comfy_table::Table;
use comfy_table::presets::UTF8_FULL_CONDENSED;
use hetsched_core::input::workload::parse_workload;
use hetsched_proto as pb;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The bytes of the job file's `[[divisible]]` `input` (relative to the current directory),
/// checked against `units × unit_bytes`; empty for a job without one (or a file the server will
/// refuse with its own message).
pub fn read_input(file: &Path, text: &str) -> anyhow::Result<Vec<u8>> {
    let origin = file.display().to_string();
    let Ok(w) = parse_workload(&origin, text) else {
        return Ok(Vec::new());
    };
    let Some(d) = w.divisible.first() else {
        return Ok(Vec::new());
    };
    let Some(input) = &d.input else {
        return Ok(Vec::new());
    };
    let path = PathBuf::from(input.get_ref());
    let src = hetsched_core::input::Source::new(&origin, text);
    let at = |message: String| {
        anyhow::anyhow!(
            "{}",
            src.error(
                Some(input.span().start),
                Some("divisible[0].input".into()),
                message
            )
        )
    };
    let cannot = |e: std::io::Error| at(format!("cannot read `{}`: {e}", path.display()));
    // Read no further than a submission can carry: a larger input (a 10 GiB data set) is
    // refused before it is read whole into memory.
    let bound = super::client::MESSAGE_LIMIT as u64;
    let opened = std::fs::File::open(&path).map_err(cannot)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&opened, bound + 1), &mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > bound {
        let size = opened.metadata().map_or(bytes.len() as u64, |m| m.len());
        return Err(at(too_large(&path, size, None)));
    }
    d.check_input_len(&src, 0, bytes.len() as u64)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(bytes)
}

/// Why a divisible job's input `path` of `size` bytes cannot be submitted, and what to do
/// instead: the input travels inside the submission, one gRPC message, which the server decodes
/// up to [`super::client::MESSAGE_LIMIT`] (beyond, it answered only gRPC's `decoded message
/// length too large`). `submission`: the whole submission's size, when the input alone fits
/// but not with the job file.
fn too_large(path: &Path, size: u64, submission: Option<usize>) -> String {
    let limit = super::client::MESSAGE_LIMIT;
    let with = match submission {
        Some(n) => format!(", {n} bytes with the job file,"),
        None => String::new(),
    };
    format!(
        "`{}` is {size} bytes ({}){with} and a divisible job's input is sent inside its \
         submission, which the server takes up to {limit} bytes ({}, job file included): leave \
         `input` and `unit_bytes` out and have the command read its units [{{start}}, {{end}}) \
         from the file on a file system every node shares (its path in `command`), or split the \
         load into jobs whose inputs are under {} each",
        path.display(),
        bytesize::ByteSize(size),
        bytesize::ByteSize(limit as u64),
        bytesize::ByteSize(limit as u64),
    )
}

/// A submission of `size` bytes, over [`super::client::MESSAGE_LIMIT`], whose job file `file`
/// (text `text`) is a divisible job with an input: refused at the job file's `input`, naming the
/// file and its size. `None` when the text has no input (the size is then not the input's).
pub fn submission_too_large(file: &Path, text: &str, size: usize) -> Option<anyhow::Error> {
    let origin = file.display().to_string();
    let w = parse_workload(&origin, text).ok()?;
    let input = w.divisible.first()?.input.as_ref()?;
    let path = PathBuf::from(input.get_ref());
    let input_size = std::fs::metadata(&path).map_or(0, |m| m.len());
    let src = hetsched_core::input::Source::new(&origin, text);
    Some(anyhow::anyhow!(
        "{}",
        src.error(
            Some(input.span().start),
            Some("divisible[0].input".into()),
            too_large(&path, input_size, Some(size))
        )
    ))
}

/// What the agent table shows for an agent none of whose chunks has finished: its speed, compute
/// latency and bandwidth are not known yet (the server sends them as 0).
const NOT_MEASURED: &str = "not measured yet";

/// The divisible part of `hetsched job N` (table form).
pub fn print(d: &pb::DivisibleInfo, state: &str, counts: &pb::TaskCounts) {
    print!("{}", text(d, state, counts));
}

/// The divisible part of `hetsched job N` as text, for job state `state` with unit counts
/// `counts`.
fn text(d: &pb::DivisibleInfo, state: &str, counts: &pb::TaskCounts) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        s,
        "divisible load `{}`{}: {} units with {}, {} done; {}; lower bound W/ΣS = {}{}",
        shown(&d.name),
        if d.requires.is_empty() {
            String::new()
        } else {
            format!(" (on nodes with {})", shown(&d.requires.join(", ")))
        },
        d.units,
        shown(&d.algo),
        d.units_done,
        hetsched_core::text::count(d.rounds, "round"),
        if d.lower_bound_s > 0.0 {
            format!("{:.3} s", d.lower_bound_s)
        } else {
            "- (nothing measured yet)".into()
        },
        if d.message.is_empty() {
            String::new()
        } else if state == "failed" {
            format!("\nfailed: {}", shown(&d.message))
        } else {
            // A cancelled job's reason says so itself (`cancelled by a user`, `cancelled: job 7,
            // which this job runs after, ended failed`): it is no failure.
            format!("\n{}", shown(&d.message))
        }
    );
    // A job that ended short of its units: which ran and failed, and which never ran (the
    // server counts those as cancelled, also for a failed job) — the counts line alone read as
    // if every unit not done had failed.
    if matches!(state, "failed" | "cancelled") && d.units_done < d.units {
        let _ = writeln!(
            s,
            "units: {} done, {} ran and failed, {} not run (stopped or never sent when the job {})",
            d.units_done,
            counts.failed,
            counts.cancelled,
            if state == "failed" {
                "failed"
            } else {
                "was cancelled"
            }
        );
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header([
        "agent",
        "speed (units/s)",
        "compute latency (s)",
        "bandwidth (units/s)",
        "memory (units)",
        "units",
        "chunks",
        "alive",
    ]);
    for w in &d.workers {
        // The server sends 0 for all four figures of an agent none of whose chunks has
        // finished yet (a measured speed is never 0): `0.0 … 0.000e0` read as a measured agent
        // that computes nothing.
        let measured = w.speed > 0.0;
        let figure = |shown: String| if measured { shown } else { "-".to_string() };
        t.add_row(super::human::row(vec![
            w.name.clone(),
            if measured {
                format!("{:.1}", w.speed)
            } else {
                NOT_MEASURED.to_string()
            },
            figure(format!("{:.4}", w.compute_latency)),
            figure(format!("{:.3e}", w.bandwidth)),
            if w.memory_units == 0 {
                "unlimited".into()
            } else {
                w.memory_units.to_string()
            },
            w.units_done.to_string(),
            w.chunks_done.to_string(),
            if w.alive { "yes" } else { "no" }.into(),
        ]));
    }
    let _ = writeln!(s, "{t}");
    // Rounds: per agent, the sizes of its chunks in that round.
    let mut rounds: BTreeMap<u32, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for c in &d.chunks {
        let mark = match c.state.as_str() {
            "done" => "",
            "out" => "…",
            "lost" => " lost",
            // Never reached its agent (a reply lost, e.g. with a crashed server): re-planned,
            // counting no loss.
            "undelivered" => " undelivered",
            // Out when its job was cancelled or failed by another chunk: its agent stopped it,
            // and nothing went wrong with it.
            "stopped" => " stopped",
            _ => " failed",
        };
        // Why a failed chunk failed, as a task's state shows it (`failed (time_limit)`); a
        // lost or stopped chunk's reason only repeats its mark.
        let why = if c.state == "failed" && !c.reason.is_empty() {
            format!(" ({})", shown(&c.reason))
        } else {
            String::new()
        };
        rounds
            .entry(c.round)
            .or_default()
            .entry(c.worker.clone())
            .or_default()
            .push(format!("{}{mark}{why}", c.end - c.start));
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(["round", "chunk sizes per agent (units)"]);
    for (r, by) in rounds {
        let cells: Vec<String> = by
            .into_iter()
            .map(|(w, sizes)| format!("{w}: {}", sizes.join(" ")))
            .collect();
        t.add_row(super::human::row(vec![
            if r == 0 && d.algo != "static" {
                "0 (calibration)".to_string()
            } else {
                r.to_string()
            },
            cells.join("; "),
        ]));
    }
    let _ = writeln!(s, "{t}");
    s
}

/// Streams job `id`'s gathered output into `sink`.
async fn read_output(
    server: &str,
    token: &str,
    ca: Option<&[u8]>,
    id: u64,
    sink: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
) -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    let channel = pb::endpoint(server, ca)?
        .connect()
        .await
        .with_context(|| format!("connecting to {server}"))?;
    let mut api = pb::divisible_client_client::DivisibleClientClient::with_interceptor(
        channel,
        pb::TokenInterceptor::new(token)?,
    );
    let mut s = api
        .read_output(pb::ReadOutputRequest { job_id: id })
        .await
        .map_err(super::client::refused)?
        .into_inner();
    while let Some(piece) = s.message().await.map_err(super::client::refused)? {
        // Awaited, not blocking: a reader that stops (`| less` on one page) holds the stream
        // back by HTTP/2's flow control while this one thread goes on answering the server's
        // pings; a blocked write here stopped the connection, which the server closes once its
        // writes have stalled for its bound.
        sink.write_all(&piece.data).await?;
    }
    sink.flush().await?;
    Ok(())
}

/// `hetsched output N [-o FILE]`: the gathered output of a completed divisible job, to FILE or
/// stdout.
pub async fn output(args: &ClientArgs, id: u64, to: Option<&Path>) -> anyhow::Result<()> {
    let token = args.token()?;
    let ca = match &args.ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?),
        None => None,
    };
    // The directories `prepare` creates, leaf first: a refusal removes them again (empty), so a
    // command that wrote nothing leaves nothing behind.
    let mut created = Vec::new();
    let file = match to {
        Some(dir) => {
            let mut missing = Some(dir);
            while let Some(d) = missing.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
                created.push(d.to_path_buf());
                missing = d.parent();
            }
            crate::out_dir::prepare(dir)?;
            Some(dir.join(format!("job-{id}.out")))
        }
        None => None,
    };
    let Some(file) = file else {
        let mut sink = tokio::io::BufWriter::new(tokio::io::stdout());
        read_output(&args.url(), &token, ca.as_deref(), id, &mut sink).await?;
        return Ok(());
    };
    // Into a file beside it, renamed over it once the whole output arrived: a refusal (a job
    // purged, not divisible, not finished) or a broken transfer leaves a file fetched before
    // as it was.
    let partial = file.with_file_name(format!(".job-{id}.out.partial"));
    let fetched = async {
        let mut sink = tokio::io::BufWriter::new(
            tokio::fs::File::create(&partial)
                .await
                .with_context(|| format!("creating {}", partial.display()))?,
        );
        read_output(&args.url(), &token, ca.as_deref(), id, &mut sink).await?;
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = fetched {
        let _ = std::fs::remove_file(&partial);
        for d in &created {
            // Only while empty: anything another process put there stays.
            let _ = std::fs::remove_dir(d);
        }
        return Err(e);
    }
    std::fs::rename(&partial, &file)
        .with_context(|| format!("renaming {} to {}", partial.display(), file.display()))?;
    eprintln!("wrote {}", file.display());
    Ok(())
}

/// `hetsched demo`'s divisible job: `rows` rows of a row-wise matrix product with faer
/// (`hetsched matrows`), input shipped by the server chunk by chunk, planned by UMRLM from the
/// agents' measured speeds; the gathered output is checked against the product computed here in
/// one piece.
pub async fn demo(
    api: &mut super::client::Api,
    url: &str,
    token: &str,
    exe: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    const ROWS: usize = 1200;
    const COLS: usize = 128;
    let a: Vec<u8> = (0..ROWS * COLS)
        .flat_map(|k| (((k * 7919) % 1000) as f64 / 250.0 - 2.0).to_le_bytes())
        .collect();
    let input = dir.join("demo-a.bin");
    std::fs::write(&input, &a)?;
    let text = format!(
        r#"name = "demo-rows"
[[divisible]]
name = "rows"
units = {ROWS}
command = ["{exe}", "matrows", "--start", "{{start}}", "--end", "{{end}}", "--input", "{{input}}", "--cols", "{COLS}", "--row-ms", "2"]
input = "{}"
unit_bytes = {}
output = "concat"
algo = "umrlm"
memory_per_unit = "1MiB"
"#,
        input.display(),
        COLS * 8
    );
    let path = dir.join("demo-rows.toml");
    std::fs::write(&path, &text)?;
    let reply = api
        .submit(pb::SubmitRequest {
            origin: path.display().to_string(),
            divisible_input: read_input(&path, &text)?,
            text,
            workdir: dir.display().to_string(),
            ..Default::default()
        })
        .await
        .map_err(super::client::refused)?
        .into_inner();
    println!(
        "submitted job {}: a divisible load of {ROWS} rows of A·B ({COLS} columns, faer), planned by umrlm",
        reply.job_id
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let job = loop {
        let j = api
            .get_job(pb::GetJobRequest {
                job_id: reply.job_id,
                // Held until the job ends or a second passes.
                wait_ms: 1000,
            })
            .await
            .map_err(super::client::refused)?
            .into_inner();
        if super::client::is_final(&j.state) {
            break j;
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "divisible job {} not finished after 5 minutes",
                reply.job_id
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    if let Some(d) = &job.divisible {
        print(d, &job.state, &job.counts.unwrap_or_default());
    }
    if job.state != "completed" {
        anyhow::bail!("divisible job {} {}", job.id, job.state);
    }
    let mut got = Vec::new();
    read_output(url, token, None, job.id, &mut got).await?;
    let expected = super::matrows::product_rows(&a, COLS)?;
    if got != expected {
        anyhow::bail!(
            "divisible job {}: the gathered output ({} bytes) differs from the product computed in one piece ({} bytes)",
            job.id,
            got.len(),
            expected.len()
        );
    }
    println!(
        "result checked: the gathered output ({} bytes) equals A·B computed here in one piece; makespan {:.2}s",
        got.len(),
        job.finished_ns.saturating_sub(job.submitted_ns) as f64 / 1e9
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(chunk: u64, worker: &str, start: u64, end: u64, state: &str) -> pb::DivisibleChunk {
        pb::DivisibleChunk {
            chunk,
            round: 0,
            worker: worker.into(),
            start,
            end,
            state: state.into(),
            ..Default::default()
        }
    }

    /// A cancelled job's chunks that were out are stopped by the cancel, not failed, and its
    /// reason is not a failure: `hetsched job N` must not report failures a user never had.
    #[test]
    fn a_cancelled_jobs_stopped_chunks_are_not_shown_failed() {
        let d = pb::DivisibleInfo {
            name: "count".into(),
            algo: "umrlm".into(),
            units: 400,
            rounds: 1,
            message: "cancelled by a user".into(),
            chunks: vec![
                chunk(0, "a1", 0, 5, "done"),
                chunk(1, "a1", 5, 15, "stopped"),
                chunk(2, "a2", 15, 20, "failed"),
                chunk(3, "a2", 20, 30, "lost"),
                chunk(4, "a1", 30, 40, "undelivered"),
            ],
            ..Default::default()
        };
        let shown = text(&d, "cancelled", &pb::TaskCounts::default());
        assert!(
            shown.contains("a1: 5 10 stopped 10 undelivered;"),
            "{shown}"
        );
        assert!(shown.contains("a2: 5 failed 10 lost"), "{shown}");
        assert!(!shown.contains("failed: cancelled"), "{shown}");
        assert!(shown.contains("\ncancelled by a user\n"), "{shown}");
        // A failed job still says it failed, and why.
        let d = pb::DivisibleInfo {
            message: "chunk 4 (units 0..4) failed: exited with exit status: 4".into(),
            ..d
        };
        let shown = text(&d, "failed", &pb::TaskCounts::default());
        assert!(
            shown.contains("\nfailed: chunk 4 (units 0..4) failed: exited"),
            "{shown}"
        );
    }

    /// The cells of the agent table's row of `agent` in `shown`, trimmed.
    fn agent_row(shown: &str, agent: &str) -> Vec<String> {
        let line = shown
            .lines()
            .find(|l| {
                l.trim_start_matches('│')
                    .trim_start()
                    .starts_with(&format!("{agent} "))
            })
            .unwrap_or_else(|| panic!("no row of {agent} in {shown}"));
        line.trim_matches('│')
            .split('┆')
            .map(|c| c.trim().to_string())
            .collect()
    }

    /// An agent none of whose chunks has finished has no measured figures: the server sends
    /// them as 0, and the table said `0.0`, `0.0000` and `0.000e0`, as if it had measured an
    /// agent that computes nothing. Its row says it is not measured yet; a measured agent's
    /// figures are shown as before.
    #[test]
    fn an_agent_not_measured_yet_shows_no_figures() {
        let d = pb::DivisibleInfo {
            name: "count".into(),
            algo: "umrlm".into(),
            units: 400,
            rounds: 1,
            workers: vec![
                pb::DivisibleWorker {
                    name: "a1".into(),
                    speed: 75.0,
                    compute_latency: 0.01,
                    bandwidth: 1041.6666666666667,
                    network_latency: 0.0005,
                    units_done: 20,
                    chunks_done: 2,
                    alive: true,
                    ..Default::default()
                },
                pb::DivisibleWorker {
                    name: "a2".into(),
                    alive: true,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let shown = text(&d, "running", &pb::TaskCounts::default());
        assert_eq!(
            agent_row(&shown, "a1"),
            [
                "a1",
                "75.0",
                "0.0100",
                "1.042e3",
                "unlimited",
                "20",
                "2",
                "yes"
            ],
            "{shown}"
        );
        assert_eq!(
            agent_row(&shown, "a2"),
            [
                "a2",
                "not measured yet",
                "-",
                "-",
                "unlimited",
                "0",
                "0",
                "yes"
            ],
            "{shown}"
        );
        assert!(!shown.contains("0.000e0"), "{shown}");
        // One round reads as one, not `1 round(s)`.
        assert!(shown.contains(" done; 1 round; lower bound"), "{shown}");
    }

    /// A failed chunk says why as a failed task does (`failed (time_limit)`); one whose agent
    /// did not say stays `failed`, and a lost chunk's `lost` is not said twice.
    #[test]
    fn a_failed_chunks_reason_is_shown_beside_it() {
        let with = |mut c: pb::DivisibleChunk, reason: &str| {
            c.reason = reason.into();
            c
        };
        let d = pb::DivisibleInfo {
            name: "count".into(),
            algo: "umrlm".into(),
            units: 30,
            rounds: 1,
            chunks: vec![
                with(chunk(0, "a1", 0, 5, "failed"), "time_limit"),
                chunk(1, "a1", 5, 15, "failed"),
                with(chunk(2, "a2", 15, 30, "lost"), "lost"),
            ],
            ..Default::default()
        };
        let shown = text(&d, "running", &pb::TaskCounts::default());
        assert!(
            shown.contains("a1: 5 failed (time_limit) 10 failed; a2: 15 lost"),
            "{shown}"
        );
    }

    /// A failed job's units that never ran read as not run, not as failures: `hetsched job N`
    /// of a 100-unit job that failed on one unit said `96 failed` and nothing else.
    #[test]
    fn a_failed_jobs_units_that_never_ran_are_shown_not_run() {
        let d = pb::DivisibleInfo {
            name: "count".into(),
            algo: "umrlm".into(),
            units: 100,
            units_done: 4,
            rounds: 1,
            message: "unit 4 failed 1 time (retries = 0): exit 3".into(),
            chunks: vec![
                chunk(0, "a1", 0, 4, "done"),
                chunk(1, "a1", 4, 5, "failed"),
                chunk(2, "a2", 5, 6, "stopped"),
            ],
            ..Default::default()
        };
        let counts = pb::TaskCounts {
            succeeded: 4,
            failed: 1,
            cancelled: 95,
            ..Default::default()
        };
        let shown = text(&d, "failed", &counts);
        assert!(
            shown.contains(
                "\nunits: 4 done, 1 ran and failed, 95 not run (stopped or never sent when the \
                 job failed)\n"
            ),
            "{shown}"
        );
        assert!(shown.contains("a1: 4 1 failed; a2: 1 stopped"), "{shown}");
        // A completed job has nothing to say of it.
        let d = pb::DivisibleInfo {
            units_done: 100,
            message: String::new(),
            ..d
        };
        let shown = text(&d, "completed", &pb::TaskCounts::default());
        assert!(!shown.contains("units:"), "{shown}");
    }
}
