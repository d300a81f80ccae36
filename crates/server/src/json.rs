//! The JSON of jobs, tasks and users that both `hetsched … --output json` and the HTTP API
//! (`/api/jobs`, `/api/job`, `/api/tasks`, `/api/users`) write, made from the same protobuf
//! replies in one place so that the two never say the same fact in two ways (a script reads
//! either). The rule is the CLI's table's: where the table shows `-` (not yet, none, not
//! measured), the JSON has `null` rather than the wire's placeholder (`0`, `""`, `-1`), and each
//! time in nanoseconds has its RFC 3339 text beside it (`started_ns` and `started`).
//!
//! A task's `reason` (`time_limit`, `signal`, …) is the stable key a script branches on where
//! `exit_code` is `null` or the prose `message` would otherwise be parsed (docs/json.md lists
//! its values); a divisible job's chunks carry the same key with the same names.
//!
//! Keys are only ever added here: scripts read both outputs.

use hetsched_proto as pb;
use serde_json::{Value, json};
use std::time::{Duration, UNIX_EPOCH};

/// The time `ns` (since the Unix epoch) in RFC 3339, UTC, to the millisecond; `None` for 0
/// (not yet).
pub fn rfc3339(ns: u64) -> Option<String> {
    (ns > 0).then(|| {
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
    })
}

/// `v[key]` (`…_ns`) as `ns`, or `null` for 0, with the RFC 3339 text under the key without
/// `_ns`.
fn set_time(v: &mut Value, key: &str, ns: u64) {
    let name = key.trim_end_matches("_ns");
    v[key] = if ns == 0 { Value::Null } else { json!(ns) };
    v[name] = rfc3339(ns).map_or(Value::Null, Value::String);
}

/// `v[key]` as `null` when it is the number 0 (what the wire sends for "none" or "not
/// measured").
fn null_if_zero(v: &mut Value, key: &str) {
    if v[key].as_f64() == Some(0.0) {
        v[key] = Value::Null;
    }
}

/// A job (the same object from `hetsched jobs`, `hetsched job N`, `/api/jobs` and `/api/job`):
/// times as ns and RFC 3339 (`finished_ns` `null` while it has not finished), `begin_ms`
/// `null` without a begin time, `duration_s` once it finished, an application's mean run
/// time `null` until one of its tasks succeeded on that variant, and a divisible job's chunk's
/// `reason` `null` when it has none (a task's `reason` names, as [`task`]'s).
pub fn job(j: &pb::JobInfo) -> Value {
    let mut v = serde_json::to_value(j).unwrap_or(Value::Null);
    set_time(&mut v, "submitted_ns", j.submitted_ns);
    set_time(&mut v, "finished_ns", j.finished_ns);
    null_if_zero(&mut v, "begin_ms");
    v["begin"] = rfc3339(j.begin_ms.saturating_mul(1_000_000)).map_or(Value::Null, Value::String);
    v["duration_s"] = if j.finished_ns >= j.submitted_ns && j.finished_ns > 0 {
        json!((j.finished_ns - j.submitted_ns) as f64 / 1e9)
    } else {
        Value::Null
    };
    if let Some(apps) = v["apps"].as_array_mut() {
        for a in apps {
            null_if_zero(a, "mean_cpu_ms");
            null_if_zero(a, "mean_gpu_ms");
        }
    }
    // `get_mut`, not `v["divisible"]["chunks"]`: indexing a `null` mutably makes it `{}`, which
    // gave every batch job `"divisible": {}` (and the dashboard took it for a divisible load).
    if let Some(chunks) = v
        .get_mut("divisible")
        .and_then(|d| d.get_mut("chunks"))
        .and_then(Value::as_array_mut)
    {
        for c in chunks {
            if c["reason"].as_str() == Some("") {
                c["reason"] = Value::Null;
            }
        }
    }
    v
}

/// A task (the same object from `hetsched tasks` and `/api/tasks`): times as ns and RFC 3339,
/// `null` for what it does not have yet or has none of — `started_ns`, `finished_ns`, `node`,
/// `variant`, `output`, `message`, `executed_node`, `exit_code` (a task killed by a signal or
/// its time limit, or one that never ran, has no exit code: the wire's -1; its `reason` says
/// why), `fetch_ms` (a batch task, an instance with no inputs, or one whose fetch is not over:
/// the wire's 0), `reason` (why its latest attempt ended without success, or why it ended
/// without running: `null` while it never ran, runs, or succeeded, and when not known) and
/// `signal` (the signal's name when `reason` is `signal` and its agent named it).
/// `usage.max_rss_bytes` stays a number, 0 when the peak was not measured (the table's `-`), as
/// scripts have read it.
pub fn task(t: &pb::TaskInfo) -> Value {
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    set_time(&mut v, "started_ns", t.started_ns);
    set_time(&mut v, "finished_ns", t.finished_ns);
    for k in [
        "node",
        "variant",
        "output",
        "message",
        "executed_node",
        "reason",
        "signal",
    ] {
        if v[k].as_str() == Some("") {
            v[k] = Value::Null;
        }
    }
    if t.exit_code == -1 {
        v["exit_code"] = Value::Null;
    }
    null_if_zero(&mut v, "fetch_ms");
    // A workflow's task ids hold its kind in their high byte, past the 2^53 that jq 1.6 or a
    // JavaScript number reads exactly: the string too.
    v["id_text"] = t.id.to_string().into();
    v
}

/// A user (the same object from `hetsched user list`, `hetsched user limit` and
/// `/api/users`): a cap of 0 is `null` (none), `fair_usage` and `fair_usage_per_share` (what
/// fair share ranks by, least first) `null` without `[fair_share]`, `created` beside
/// `created_ms` (`null` for the admin's row, which was never created), and `admin` for the
/// admin's own row (only `/api/users` lists it).
pub fn user(u: &pb::UserInfo) -> Value {
    let cap = |n: u64| (n > 0).then_some(n);
    json!({
        "name": u.name,
        "admin": u.admin,
        "created_ms": u.created_ms,
        "created": rfc3339(u.created_ms.saturating_mul(1_000_000)),
        "shares": u.shares,
        "max_priority": u.max_priority,
        "max_cores": cap(u.max_cores.into()),
        "max_memory_bytes": cap(u.max_memory_bytes),
        "max_gpus": cap(u.max_gpus.into()),
        "cores": u.cores,
        "memory_bytes": u.memory_bytes,
        "gpus": u.gpus,
        "fair_usage": u.fair_usage,
        "fair_usage_per_share": u.fair_usage.map(|f| f / f64::from(u.shares.max(1))),
        "jobs": u.jobs,
        "unfinished_jobs": u.unfinished_jobs,
        "pending_jobs": u.pending_jobs,
        "running_jobs": u.running_jobs,
    })
}

/// A node (`hetsched nodes --output json`, `/api/nodes`): `null` for what it has not reported.
pub fn node(n: &pb::NodeInfo) -> Value {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    if n.available_memory_bytes == 0 {
        v["available_memory_bytes"] = Value::Null;
    }
    // Unknown: an agent, or a server, that predates saying it.
    if n.version.is_empty() {
        v["version"] = Value::Null;
    }
    // Unknown: never heard, or dead before a server that kept it.
    if n.last_heard_ms == 0 {
        v["last_heard_ms"] = Value::Null;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pending task, as the wire sends it: every placeholder is `null` in the JSON.
    #[test]
    fn a_pending_tasks_placeholders_are_null() {
        let t = pb::TaskInfo {
            state: "pending".into(),
            exit_code: -1,
            ..Default::default()
        };
        let v = task(&t);
        for k in [
            "started_ns",
            "started",
            "finished_ns",
            "finished",
            "node",
            "variant",
            "output",
            "message",
            "executed_node",
            "exit_code",
            "fetch_ms",
            "usage",
            "reason",
            "signal",
        ] {
            assert_eq!(v[k], Value::Null, "{k}: {v}");
        }
        assert_eq!(v["state"], "pending");
    }

    /// A task killed by a signal has no exit code, but a reason and the signal's name.
    #[test]
    fn a_signalled_tasks_reason_and_signal_are_strings_and_its_exit_code_null() {
        let t = pb::TaskInfo {
            state: "failed".into(),
            exit_code: -1,
            reason: "signal".into(),
            signal: "SEGV".into(),
            ..Default::default()
        };
        let v = task(&t);
        assert_eq!(
            (&v["exit_code"], &v["reason"], &v["signal"]),
            (&Value::Null, &json!("signal"), &json!("SEGV"))
        );
    }

    #[test]
    fn a_finished_tasks_figures_stay_and_an_unmeasured_peak_is_null() {
        let t = pb::TaskInfo {
            exit_code: 0,
            started_ns: 1_700_000_000_000_000_000,
            finished_ns: 1_700_000_001_000_000_000,
            fetch_ms: 250,
            usage: Some(pb::TaskUsage {
                cpu_user_ms: 0,
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = task(&t);
        assert_eq!(v["exit_code"], 0);
        assert_eq!(v["fetch_ms"], 250);
        assert_eq!(v["started"], "2023-11-14T22:13:20.000Z");
        assert_eq!(v["usage"]["cpu_user_ms"], 0, "a measured 0 ms stays");
        assert_eq!(v["usage"]["max_rss_bytes"], 0, "0: not measured, a number");
    }

    #[test]
    fn an_unfinished_job_without_a_begin_time_has_null_for_both() {
        let v = job(&pb::JobInfo {
            submitted_ns: 1_700_000_000_000_000_000,
            ..Default::default()
        });
        assert_eq!(v["finished_ns"], Value::Null);
        assert_eq!(v["begin_ms"], Value::Null);
        assert_eq!(v["begin"], Value::Null);
        assert_eq!(v["duration_s"], Value::Null);
        assert_eq!(v["submitted_ns"], 1_700_000_000_000_000_000u64);
    }

    #[test]
    fn a_users_fair_usage_is_null_without_fair_share_and_a_cap_of_0_is_none() {
        let mut u = pb::UserInfo {
            name: "alice".into(),
            shares: 2,
            max_cores: 4,
            ..Default::default()
        };
        let v = user(&u);
        assert_eq!(v["fair_usage"], Value::Null);
        assert_eq!(v["fair_usage_per_share"], Value::Null);
        assert_eq!(v["max_cores"], 4);
        assert_eq!(v["max_gpus"], Value::Null);
        assert_eq!(v["admin"], false);
        u.fair_usage = Some(0.0);
        let v = user(&u);
        assert_eq!(v["fair_usage"], 0.0, "measured: no usage yet");
        assert_eq!(v["fair_usage_per_share"], 0.0);
    }
}
