//! How the runtime's commands talk to people and programs: durations for humans (`3m 10s ago`),
//! RFC 3339 times beside nanoseconds and `null` where a table shows `-` in JSON, error chains
//! without repetition, a hint when the server does not answer, colour only on a terminal (and
//! never with `NO_COLOR`), and a quiet exit when the reader of stdout goes away (`… | head`).

use hetsched_proto as pb;
use serde_json::Value;
use std::borrow::Cow;
use std::io::IsTerminal;
use std::time::{Duration, UNIX_EPOCH};

/// A string the server sent (a name, an owner, a message) as text output prints it: its
/// control characters but `\n` and its invisible formatting characters escaped
/// ([`hetsched_core::text::escaped`]), so that an older or hostile server cannot put a terminal
/// escape (ANSI, OSC) on the user's terminal, nor a name with a bidi override (`job\u{202e}txt`)
/// read otherwise than it is. JSON output needs none (`serde_json` escapes control characters,
/// and a program reads the code points); a task's own output as `hetsched log` gives it is
/// not passed through it (its excerpt in a failure report is).
pub fn shown(s: &str) -> Cow<'_, str> {
    hetsched_core::text::escaped(s)
}

/// A table row of cells, each [`shown`]: every row the text output makes of what the server
/// sent goes through it (and a cell made here, a count or a duration, passes unchanged).
pub fn row<S: AsRef<str>>(cells: impl IntoIterator<Item = S>) -> Vec<String> {
    cells
        .into_iter()
        .map(|c| shown(c.as_ref()).into_owned())
        .collect()
}

/// A duration as people read it: `850ms`, `5.2s`, `3m 10s`, `2h 5m`, `3d 4h`.
pub fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let s = d.as_secs();
    if ms < 1000 {
        format!("{ms}ms")
    } else if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m {}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h {}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d {}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// The CPU time of work whose usage was measured if its peak memory is known (`max_rss_bytes`
/// above 0): then a measured 0 ms (sleeping tasks) is shown as such; else as [`cpu_time`].
pub fn measured_cpu_time(ms: u64, max_rss_bytes: u64) -> String {
    if max_rss_bytes > 0 {
        duration(std::time::Duration::from_millis(ms))
    } else {
        cpu_time(ms)
    }
}

/// CPU time from ms, as [`duration`] writes it; `-` for none.
pub fn cpu_time(ms: u64) -> String {
    if ms == 0 {
        "-".into()
    } else {
        duration(Duration::from_millis(ms))
    }
}

/// A task's time limit from its CPU and GPU variants' (ms, 0: none or no such variant), as
/// [`duration`] writes it: one figure when the variants agree or only one has a limit, else
/// `cpu 1h 0m / gpu 10m 0s`; `-` for none.
pub fn time_limit(cpu_ms: u64, gpu_ms: u64) -> String {
    let d = |ms: u64| duration(Duration::from_millis(ms));
    match (cpu_ms, gpu_ms) {
        (0, 0) => "-".into(),
        (c, g) if c == g || g == 0 => d(c),
        (0, g) => d(g),
        (c, g) => format!("cpu {} / gpu {}", d(c), d(g)),
    }
}

/// What one task holds, from its CPU and GPU variants' cores (0: no such variant), memory
/// (bytes, 0: none declared), devices and their kind (empty: any): `4 cores, 8.0 GiB`; `cpu 4
/// cores, 8.0 GiB / gpu 1 core, 2 GPUs (a100)` when the variants differ; `-` for neither (a
/// multi-node application).
pub fn per_task(cpu: (u32, u64, u32), gpu: (u32, u64, u32), gpu_kind: &str) -> String {
    let one = |(cores, bytes, gpus): (u32, u64, u32)| {
        let mut said = vec![match cores {
            1 => "1 core".to_string(),
            n => format!("{n} cores"),
        }];
        if bytes > 0 {
            said.push(memory(bytes));
        }
        let kind = match gpu_kind {
            "" => String::new(),
            k => format!(" ({k})"),
        };
        match gpus {
            0 => {}
            1 => said.push(format!("1 GPU{kind}")),
            n => said.push(format!("{n} GPUs{kind}")),
        }
        said.join(", ")
    };
    match (cpu.0, gpu.0) {
        (0, 0) => "-".into(),
        (_, 0) => one(cpu),
        (0, _) => one(gpu),
        _ if cpu == gpu => one(cpu),
        _ => format!("cpu {} / gpu {}", one(cpu), one(gpu)),
    }
}

/// Bytes in binary units (`48.0 MiB`); `-` for none (not measured).
pub fn memory(bytes: u64) -> String {
    if bytes == 0 {
        "-".into()
    } else {
        bytesize::ByteSize(bytes).to_string()
    }
}

/// The free space on a node's work directory's disk, marked when it is below its agent's
/// `min_free_disk` (fetched workflow inputs find no room there); `-` when not reported.
pub fn disk_free(n: &pb::NodeInfo) -> String {
    match n.disk_free_bytes {
        None => "-".into(),
        Some(free) if free < n.min_free_disk => format!(
            "{} (below min_free_disk {})",
            bytesize::ByteSize(free),
            bytesize::ByteSize(n.min_free_disk)
        ),
        Some(free) => bytesize::ByteSize(free).to_string(),
    }
}

/// `3m 10s ago`.
pub fn ago(d: Duration) -> String {
    format!("{} ago", duration(d))
}

/// A drained node's state: `drained`, with the operator's reason and how long ago when known
/// (`drained: bad fan, 2h ago`).
pub fn drained(reason: &str, since_ms: u64) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let when = (since_ms > 0).then(|| ago(Duration::from_millis(now_ms.saturating_sub(since_ms))));
    match (reason, when) {
        ("", None) => "drained".into(),
        ("", Some(w)) => format!("drained {w}"),
        (r, None) => format!("drained: {r}"),
        (r, Some(w)) => format!("drained: {r}, {w}"),
    }
}

/// The time `ns` (since the Unix epoch) in RFC 3339, UTC; None for 0 (not yet). The JSON's
/// times ([`hetsched_server::json::rfc3339`]), so that a table and the JSON agree.
pub fn rfc3339(ns: u64) -> Option<String> {
    hetsched_server::json::rfc3339(ns)
}

/// An error and its causes on one line, each cause once: a cause whose text its parent already
/// contains (transport errors often repeat their source) is left out.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether a failed connection was refused (nothing listens there).
pub fn refused_connection(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(x) = cur {
        if let Some(io) = x.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        if x.to_string().contains("Connection refused") {
            return true;
        }
        cur = x.source();
    }
    false
}

/// What to do when the server does not answer at `server`.
pub fn start_hint(server: &str) -> String {
    format!(
        "nothing answers at {server}: is the server running? Start one with `hetsched server` \
         (it listens on 127.0.0.1:7420 and writes its client token to hetsched-data/token), or \
         point --server / HETSCHED_SERVER at yours"
    )
}

/// Whether logs on stderr may carry colours: only on a terminal, and never with `NO_COLOR` set
/// (<https://no-color.org>).
pub fn colour() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

/// A command that prints and exits ends quietly when its reader goes away (`hetsched tasks |
/// head`): `println!` panics on the failed write, and this hook turns that one panic into exit
/// status 141 (what a shell reports for SIGPIPE) without a message. Other panics are reported as
/// usual. Not for the long-running server and agent.
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE_STATUS);
        }
        default(info);
    }));
}

/// A command's failure that ends it with its own exit status rather than 1, so that a script
/// can tell it from a failed job: `wait` past its `--timeout` (124, as `timeout(1)` exits).
#[derive(Debug)]
pub struct Exit {
    /// The process's exit status.
    pub status: u8,
    /// What the `error:` line says.
    pub message: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// The exit status of `wait` and `submit --wait` when the time-out passed before the jobs ended
/// (that of `timeout(1)`).
pub const TIMED_OUT_STATUS: u8 = 124;

/// The exit status when the server cannot be reached or does not answer (sysexits'
/// `EX_UNAVAILABLE`): a script may try again later.
pub const UNAVAILABLE_STATUS: u8 = 69;

/// The exit status when the server refuses the token or the call to this user (sysexits'
/// `EX_NOPERM`): the credentials need fixing, not the request.
pub const NO_PERMISSION_STATUS: u8 = 77;

/// The exit status when the server speaks another protocol or version (sysexits'
/// `EX_PROTOCOL`): TLS to a plain server or plain text to a TLS one (the address's scheme,
/// `http://` or `https://`, needs fixing), or a call the server does not offer (an older server,
/// or no hetsched server at that address): neither waiting nor other credentials mend it.
pub const PROTOCOL_STATUS: u8 = 76;

/// The exit status an error asks for ([`Exit`], as the error or a context of it); `None`: the
/// usual failure (1).
pub fn exit_status(e: &anyhow::Error) -> Option<u8> {
    e.downcast_ref::<Exit>().map(|x| x.status).or_else(|| {
        e.chain()
            .find_map(|c| c.downcast_ref::<Exit>().map(|x| x.status))
    })
}

/// The exit status after the reader of stdout went away (128 + SIGPIPE).
pub const BROKEN_PIPE_STATUS: i32 = 141;

/// Whether an error is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// A job as JSON (the same shape from `jobs` and `job N`, and from the HTTP API's `/api/jobs`
/// and `/api/job`): [`hetsched_server::json::job`], one builder for both, so they agree.
pub fn job_json(j: &pb::JobInfo) -> Value {
    hetsched_server::json::job(j)
}

/// How many run, and of those how many wait in their agent's queue (`prefetch`) or still fetch
/// their inputs (workflow instances), their program not started: `5`, `5 (3 queued)`,
/// `5 (1 queued, 2 fetching)`.
pub fn running(c: &pb::TaskCounts) -> String {
    format!("{}{}", c.running, running_notes(c))
}

/// What [`running`] says after the number: ` (3 queued)`, ` (2 fetching)`, or nothing.
pub fn running_notes(c: &pb::TaskCounts) -> String {
    let notes: Vec<String> = [(c.queued, "queued"), (c.fetching, "fetching")]
        .into_iter()
        .filter(|&(n, _)| n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join(", "))
    }
}

/// A task as JSON (as the HTTP API's `/api/tasks` writes it): times as ns and RFC 3339, `null`
/// for what it does not have yet ([`hetsched_server::json::task`], one builder for both).
pub fn task_json(t: &pb::TaskInfo) -> Value {
    hetsched_server::json::task(t)
}

/// A node as JSON ([`hetsched_server::json::node`], as `/api/nodes` writes it).
pub fn node_json(n: &pb::NodeInfo) -> Value {
    hetsched_server::json::node(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_escapes_each_cell_of_what_the_server_sent_and_keeps_plain_ones() {
        let cells = row(["job-1", "x\u{1b}]52;c;aGk=\u{7}y", "a\rb", "ü\nnext", ""]);
        assert_eq!(
            cells,
            ["job-1", "x\\u{1b}]52;c;aGk=\\u{7}y", "a\\rb", "ü\nnext", ""]
        );
        assert!(matches!(shown("plain"), Cow::Borrowed("plain")));
        assert_eq!(shown("\u{9b}31m"), "\\u{9b}31m", "a C1 CSI too");
    }

    /// "Trojan Source": a name or message holding a bidi override reads otherwise than it is
    /// (`job\u{202e}txt.exe` as `jobexe.txt`); text output shows the code points escaped.
    #[test]
    fn a_row_escapes_bidi_controls_and_zero_width_characters() {
        let cells = row([
            "job\u{202e}txt.exe",
            "\u{2066}a\u{2069}",
            "ad\u{200d}min",
            "作业 عمل",
        ]);
        assert_eq!(
            cells,
            [
                "job\\u{202e}txt.exe",
                "\\u{2066}a\\u{2069}",
                "ad\\u{200d}min",
                "作业 عمل"
            ]
        );
        assert_eq!(shown("x\u{200f}\u{61c}"), "x\\u{200f}\\u{61c}");
    }

    #[test]
    fn durations_read_like_a_person_writes_them() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(5_160)), "5.2s");
        assert_eq!(ago(Duration::from_millis(189_919)), "3m 9s ago");
        assert_eq!(duration(Duration::from_secs(7_500)), "2h 5m");
        assert_eq!(
            duration(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d 4h"
        );
    }

    #[test]
    fn a_drain_says_why_and_since_when_as_far_as_known() {
        assert_eq!(drained("", 0), "drained");
        assert_eq!(drained("bad fan", 0), "drained: bad fan");
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let said = drained("bad fan", now - 7_200_000);
        assert!(
            said.starts_with("drained: bad fan, 2h") && said.ends_with(" ago"),
            "{said}"
        );
        assert!(drained("", now - 60_000).starts_with("drained 1m"));
    }

    #[test]
    fn what_one_task_holds_is_one_figure_unless_the_variants_differ() {
        assert_eq!(per_task((0, 0, 0), (0, 0, 0), ""), "-");
        assert_eq!(per_task((1, 0, 0), (0, 0, 0), ""), "1 core");
        assert_eq!(per_task((4, 8 << 30, 0), (0, 0, 0), ""), "4 cores, 8.0 GiB");
        assert_eq!(per_task((0, 0, 0), (2, 0, 1), ""), "2 cores, 1 GPU");
        assert_eq!(
            per_task((0, 0, 0), (2, 0, 1), "a100"),
            "2 cores, 1 GPU (a100)"
        );
        assert_eq!(
            per_task((2, 1 << 30, 0), (2, 1 << 30, 0), ""),
            "2 cores, 1.0 GiB"
        );
        assert_eq!(
            per_task((4, 1 << 30, 0), (1, 0, 2), "h100"),
            "cpu 4 cores, 1.0 GiB / gpu 1 core, 2 GPUs (h100)"
        );
    }

    #[test]
    fn a_time_limit_is_one_figure_unless_the_variants_differ() {
        assert_eq!(time_limit(0, 0), "-");
        assert_eq!(time_limit(90_000, 0), "1m 30s");
        assert_eq!(time_limit(0, 90_000), "1m 30s");
        assert_eq!(time_limit(3_600_000, 3_600_000), "1h 0m");
        assert_eq!(time_limit(3_600_000, 600_000), "cpu 1h 0m / gpu 10m 0s");
    }

    #[test]
    fn a_repeated_cause_is_printed_once() {
        let e = anyhow::anyhow!("Address already in use (os error 98)")
            .context("Address already in use (os error 98)")
            .context("cannot listen on 127.0.0.1:7420");
        assert_eq!(
            error_chain(&e),
            "cannot listen on 127.0.0.1:7420: Address already in use (os error 98)"
        );
    }

    #[test]
    fn json_has_null_for_not_yet_and_rfc3339_beside_nanoseconds() {
        let t = pb::TaskInfo {
            exit_code: -1,
            started_ns: 1_700_000_000_000_000_000,
            ..Default::default()
        };
        let v = task_json(&t);
        assert_eq!(v["finished_ns"], Value::Null);
        assert_eq!(v["finished"], Value::Null);
        assert_eq!(v["exit_code"], Value::Null);
        assert_eq!(v["node"], Value::Null);
        assert_eq!(v["started"], "2023-11-14T22:13:20.000Z");
        assert_eq!(v["started_ns"], 1_700_000_000_000_000_000u64);
    }
}
