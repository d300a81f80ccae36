//! The worker as a process (`hetsched stream-worker --config FILE`, started by an agent): a
//! [`Worker`] driven by JSON lines on stdin, answering JSON lines on stdout.
//!
//! Out (stdout), one JSON object per line:
//! - `{"event": "listening", "addr": "127.0.0.1:40123", "pid": 4242}` once started;
//! - `{"event": "report", "report": {...}}` every `report_every` and when asked
//!   ([`crate::metrics::WorkerReport`]: cumulative counters);
//! - `{"event": "error", "message": "..."}` when it cannot start (then it exits with status 1).
//!
//! In (stdin), one JSON object per line:
//! - `{"cmd": "peers", "peers": {"1": "127.0.0.1:40124", ...}}`: where the other workers listen;
//! - `{"cmd": "assign", "worker": 2, "assignment": [...], "await_state": [...]}`: a new
//!   placement (it becomes worker 2): executors that stay keep running, those that leave hand
//!   their state over and stop, those that arrive start (those in `await_state` once their
//!   state arrives); answered `{"event": "assigned", "worker": 2, "started": [...],
//!   "stopped": [...]}`;
//! - `{"cmd": "report"}`: report now (the server asks when it considers a reschedule);
//! - `{"cmd": "stop"}`: stop (components finish: counts write their last snapshot).
//!
//! End of stdin (the agent is gone) stops the worker too: an orphaned worker would keep
//! counting for a placement the server may already have replaced.
//!
//! On Linux the worker process is a child subreaper ([`crate::process_tree`]): what its
//! multi-lang programs started and left behind (a daemon that forked twice and left the
//! program's process group) is re-parented to it, reaped when it exits, and ended with its
//! program (found by the program's mark, [`crate::process_tree::MARK`]) or at the latest when
//! the worker stops, so no program's descendant outlives its worker.

use crate::process_tree;
use crate::worker::{Worker, WorkerConfig, WorkerError};
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

/// How long what the programs left behind has between SIGTERM and SIGKILL when the worker
/// stops (as a program's own group, `multilang`).
const KILL_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
enum Cmd {
    Peers {
        peers: HashMap<String, String>,
    },
    Assign {
        worker: u32,
        assignment: Vec<u32>,
        #[serde(default)]
        await_state: Vec<u32>,
    },
    Report,
    Stop,
}

fn emit(line: &serde_json::Value) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
}

/// Runs a worker process until told to stop or until stdin closes.
pub fn run_process(config: WorkerConfig, report_every: Duration) -> Result<(), WorkerError> {
    // Before any program starts, so that none of its descendants can be re-parented past us.
    if let Err(e) = process_tree::become_subreaper() {
        tracing::warn!("{e}: what multi-lang programs leave behind may outlive the worker");
    }
    let worker = match Worker::start(config) {
        Ok(w) => w,
        Err(e) => {
            emit(&serde_json::json!({"event": "error", "message": e.to_string()}));
            return Err(e);
        }
    };
    emit(&serde_json::json!({
        "event": "listening",
        "addr": worker.local_addr().to_string(),
        "pid": std::process::id(),
    }));
    let (tx, rx) = mpsc::channel::<Option<Cmd>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Cmd>(&line) {
                Ok(c) => {
                    if tx.send(Some(c)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    emit(
                        &serde_json::json!({"event": "error", "message": format!("bad command: {e}")}),
                    );
                }
            }
        }
        let _ = tx.send(None);
    });
    loop {
        match rx.recv_timeout(report_every) {
            Ok(Some(Cmd::Peers { peers })) => {
                let map = peers
                    .into_iter()
                    .filter_map(|(k, v)| {
                        Some((k.parse::<u32>().ok()?, v.parse::<SocketAddr>().ok()?))
                    })
                    .collect();
                worker.set_peers(map);
            }
            Ok(Some(Cmd::Assign {
                worker: w,
                assignment,
                await_state,
            })) => {
                let event = match worker.reassign(w, assignment, &await_state) {
                    Ok((started, stopped)) => serde_json::json!({
                        "event": "assigned", "worker": w, "started": started, "stopped": stopped,
                    }),
                    Err(message) => serde_json::json!({"event": "error", "message": message}),
                };
                emit(&event);
            }
            Ok(Some(Cmd::Report)) | Err(mpsc::RecvTimeoutError::Timeout) => {
                let r = worker.report();
                if !emit(&serde_json::json!({"event": "report", "report": r})) {
                    break;
                }
            }
            Ok(Some(Cmd::Stop)) | Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        // Orphans of the programs that exited, re-parented here: reaped, not left as zombies.
        process_tree::reap_adopted();
    }
    worker.stop();
    // The executors have ended their programs (and what was below them); what is left below
    // the worker was left behind by programs and re-parented here.
    let left = process_tree::end_all_descendants(KILL_GRACE);
    if left > 0 {
        tracing::warn!(
            "ended what multi-lang programs left behind: {} still running below the worker",
            hetsched_core::text::count(left as u64, "program descendant")
        );
    }
    Ok(())
}
