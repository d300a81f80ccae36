//! `hetsched usage`: the server's accounts (docs/runtime.md, "Accounting"): how many core-,
//! GPU- and memory-hours each owner's running work held over a span of UTC days, per owner or
//! per day. The admin sees every owner's; a user its own.

use super::ClientArgs;
use super::client::{connect, json, refused, table};
use anyhow::{Context, bail};
use hetsched_proto as pb;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds in a day.
const DAY_S: u64 = 86_400;

/// Days the accounts cover when `--since` is not given: the last 30, today included.
const DEFAULT_DAYS: u32 = 30;

/// A day as `--since`/`--until` take it: `YYYY-MM-DD` (UTC), `today`, or `Nd` (N days ago).
/// Parsed to days since 1970-01-01.
pub fn parse_day(s: &str) -> Result<u32, String> {
    let today = today();
    if s == "today" {
        return Ok(today);
    }
    if let Some(n) = s.strip_suffix('d')
        && let Ok(n) = n.parse::<u32>()
    {
        return today
            .checked_sub(n)
            .ok_or_else(|| format!("`{s}`: before 1970"));
    }
    let t = humantime::parse_rfc3339(&format!("{s}T00:00:00Z")).map_err(|_| {
        format!("`{s}`: a day is YYYY-MM-DD (UTC), `today`, or Nd for N days ago (`30d`)")
    })?;
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("`{s}`: before 1970"))?
        .as_secs();
    u32::try_from(secs / DAY_S).map_err(|_| format!("`{s}`: too far ahead"))
}

/// Today, in days since 1970-01-01 (UTC).
fn today() -> u32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    u32::try_from(secs / DAY_S).unwrap_or(u32::MAX)
}

/// Day `day` (since 1970-01-01) as `YYYY-MM-DD`.
fn date(day: u32) -> String {
    let t = UNIX_EPOCH + Duration::from_secs(u64::from(day) * DAY_S);
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .chars()
        .take(10)
        .collect()
}

/// What one row of the output adds up.
#[derive(Default)]
struct Sum {
    core_seconds: f64,
    gpu_seconds: f64,
    memory_byte_seconds: f64,
}

impl Sum {
    fn add(&mut self, r: &pb::UsageRow) {
        self.core_seconds += r.core_seconds;
        self.gpu_seconds += r.gpu_seconds;
        self.memory_byte_seconds += r.memory_byte_seconds;
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "core_hours": self.core_seconds / 3600.0,
            "gpu_hours": self.gpu_seconds / 3600.0,
            "memory_gib_hours": self.memory_byte_seconds / 3600.0 / GIB,
            "core_seconds": self.core_seconds,
            "gpu_seconds": self.gpu_seconds,
            "memory_byte_seconds": self.memory_byte_seconds,
        })
    }

    fn cells(&self, total_core_seconds: f64) -> Vec<String> {
        let share = if total_core_seconds > 0.0 {
            format!("{:.1} %", 100.0 * self.core_seconds / total_core_seconds)
        } else {
            "-".to_string()
        };
        vec![
            format!("{:.2}", self.core_seconds / 3600.0),
            format!("{:.2}", self.gpu_seconds / 3600.0),
            format!("{:.2}", self.memory_byte_seconds / 3600.0 / GIB),
            share,
        ]
    }
}

/// `used` as a fraction of `offered`; `None` when nothing was offered.
fn fraction(used: f64, offered: f64) -> Option<f64> {
    (offered > 0.0).then(|| used / offered)
}

/// Bytes in a GiB.
const GIB: f64 = (1u64 << 30) as f64;

/// `hetsched usage [--since DAY] [--until DAY] [--by-day]`.
pub async fn usage(
    args: &ClientArgs,
    since: Option<u32>,
    until: Option<u32>,
    by_day: bool,
) -> anyhow::Result<()> {
    let until = until.unwrap_or_else(today);
    let since = since.unwrap_or_else(|| until.saturating_sub(DEFAULT_DAYS - 1));
    if since > until {
        bail!("--since {} is after --until {}", date(since), date(until));
    }
    let reply = connect(args)
        .await?
        .usage(pb::UsageRequest {
            since_day: since,
            until_day: until,
        })
        .await
        .map_err(refused)
        .context("reading the accounts")?
        .into_inner();
    let mut owners: BTreeMap<&str, Sum> = BTreeMap::new();
    let mut days: BTreeMap<(u32, &str), Sum> = BTreeMap::new();
    let mut total = Sum::default();
    // What the live nodes offered (the rows of the empty owner).
    let mut capacity = Sum::default();
    for r in &reply.rows {
        if r.owner.is_empty() {
            capacity.add(r);
            continue;
        }
        owners.entry(&r.owner).or_default().add(r);
        days.entry((r.day, &r.owner)).or_default().add(r);
        total.add(r);
    }
    let (since, until) = (date(reply.since_day), date(reply.until_day));
    if args.output == super::Output::Json {
        let users: Vec<_> = owners
            .iter()
            .map(|(o, s)| {
                let mut v = s.json();
                v["user"] = serde_json::json!(o);
                v
            })
            .collect();
        let mut doc = serde_json::json!({
            "since": since,
            "until": until,
            "users": users,
            "total": total.json(),
            "capacity": capacity.json(),
            "utilisation": {
                "cores": fraction(total.core_seconds, capacity.core_seconds),
                "gpus": fraction(total.gpu_seconds, capacity.gpu_seconds),
                "memory": fraction(total.memory_byte_seconds, capacity.memory_byte_seconds),
            },
        });
        if by_day {
            doc["days"] = days
                .iter()
                .map(|((d, o), s)| {
                    let mut v = s.json();
                    v["day"] = serde_json::json!(date(*d));
                    v["user"] = serde_json::json!(o);
                    v
                })
                .collect();
        }
        return json(&doc);
    }
    println!("usage from {since} to {until} (UTC days; what running work held)");
    let percent = |used: f64, offered: f64| {
        fraction(used, offered).map_or("-".to_string(), |f| format!("{:.1} %", 100.0 * f))
    };
    println!(
        "capacity: {:.2} core-hours, {:.2} GPU-hours; used: {} of the core-hours, {} of the \
         GPU-hours",
        capacity.core_seconds / 3600.0,
        capacity.gpu_seconds / 3600.0,
        percent(total.core_seconds, capacity.core_seconds),
        percent(total.gpu_seconds, capacity.gpu_seconds),
    );
    let head = ["core-hours", "GPU-hours", "memory GiB-hours", "core share"];
    let mut t = if by_day {
        table(&[&["day", "user"][..], &head[..]].concat())
    } else {
        table(&[&["user"][..], &head[..]].concat())
    };
    if by_day {
        for ((d, o), s) in &days {
            let mut row = vec![date(*d), o.to_string()];
            row.extend(s.cells(total.core_seconds));
            t.add_row(row);
        }
    } else {
        for (o, s) in &owners {
            let mut row = vec![o.to_string()];
            row.extend(s.cells(total.core_seconds));
            t.add_row(row);
        }
    }
    let mut row = if by_day {
        vec!["total".to_string(), String::new()]
    } else {
        vec!["total".to_string()]
    };
    row.extend(total.cells(total.core_seconds));
    t.add_row(row);
    println!("{t}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_dates_today_or_days_ago() {
        assert_eq!(parse_day("1970-01-02"), Ok(1));
        assert_eq!(date(20_422), "2025-11-30");
        assert_eq!(parse_day("2025-11-30"), Ok(20_422));
        assert_eq!(parse_day("today"), Ok(today()));
        assert_eq!(parse_day("7d"), Ok(today() - 7));
        let e = parse_day("30-11-2025").expect_err("not a day");
        assert!(e.contains("YYYY-MM-DD"), "{e}");
    }
}
