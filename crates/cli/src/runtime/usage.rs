//! `hetsched usage`: the server's accounts (docs/runtime.md, "Accounting"): how many core-,
//! GPU- and memory-hours each owner's running work held over a span of UTC days, per owner or
//! per day. The admin sees every owner's; a user its own.

use super::ClientArgs;
use super::client::{connect, json, refused, table};
use anyhow::{Context, bail};
use hetsched_proto as pb;
use hetsched_server::accounting::{GIB, Held, Summary, UsageRow, date, fraction};

/// Days the accounts cover when `--since` is not given: the last 30, today included.
const DEFAULT_DAYS: u32 = 30;

/// A day as `--since`/`--until` take it: `YYYY-MM-DD` (UTC), `today`, or `Nd` (N days ago).
/// Parsed to days since 1970-01-01 (the server's one parser, which the dashboard's
/// `/api/usage` reads its days with too).
pub fn parse_day(s: &str) -> Result<u32, String> {
    hetsched_server::accounting::parse_day(s, hetsched_server::accounting::today())
}

/// A row of the table: core-, GPU- and memory-hours and, when the table lists every owner, the
/// share of the span's core-hours (`total_core_seconds`; `None`: a user's own account, whose
/// share of itself says nothing).
fn cells(h: &Held, total_core_seconds: Option<f64>) -> Vec<String> {
    let mut cells = vec![
        hours(h.core_seconds / 3600.0),
        hours(h.gpu_seconds / 3600.0),
        hours(h.memory_byte_seconds / 3600.0 / GIB),
    ];
    if let Some(total) = total_core_seconds {
        cells.push(if total > 0.0 {
            format!("{:.1} %", 100.0 * h.core_seconds / total)
        } else {
            "-".to_string()
        });
    }
    cells
}

/// The smallest amount of hours the table prints as a number (0.36 s); less reads
/// `<0.0001`. `--output json` keeps every amount whole.
const SMALLEST_HOURS: f64 = 1e-4;

/// An amount of hours as the table prints it: two decimals, or three significant digits below
/// 0.01 (a short span's few core-seconds read `0.00169`, not `0.00`), down to
/// [`SMALLEST_HOURS`]; below it `<0.0001`, not `0.0000123` or twelve decimals.
fn hours(h: f64) -> String {
    if h <= 0.0 || h >= 0.01 || !h.is_finite() {
        return format!("{h:.2}");
    }
    if h < SMALLEST_HOURS {
        return format!("<{SMALLEST_HOURS}");
    }
    let decimals = (2 - h.log10().floor() as i32).clamp(2, 6) as usize;
    format!("{h:.decimals$}")
}

/// `hetsched usage [--since DAY] [--until DAY] [--by-day]`.
pub async fn usage(
    args: &ClientArgs,
    since: Option<u32>,
    until: Option<u32>,
    by_day: bool,
) -> anyhow::Result<()> {
    let until = until.unwrap_or_else(hetsched_server::accounting::today);
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
    let rows: Vec<UsageRow> = reply
        .rows
        .into_iter()
        .map(|r| UsageRow {
            owner: r.owner,
            day: r.day,
            held: Held {
                core_seconds: r.core_seconds,
                gpu_seconds: r.gpu_seconds,
                memory_byte_seconds: r.memory_byte_seconds,
            },
        })
        .collect();
    // The same sums and JSON as the dashboard's `/api/usage`.
    let sum = Summary::of(reply.since_day, reply.until_day, &rows);
    if args.output == super::Output::Json {
        return json(&sum.json(by_day));
    }
    let (total, capacity) = (&sum.total, &sum.capacity);
    println!(
        "usage from {} to {} (UTC days; what running work held)",
        date(sum.since),
        date(sum.until)
    );
    let percent = |used: f64, offered: f64| {
        fraction(used, offered).map_or("-".to_string(), |f| format!("{:.1} %", 100.0 * f))
    };
    println!(
        "capacity: {} core-hours, {} GPU-hours; used: {} of the core-hours, {} of the \
         GPU-hours",
        hours(capacity.core_seconds / 3600.0),
        hours(capacity.gpu_seconds / 3600.0),
        percent(total.core_seconds, capacity.core_seconds),
        percent(total.gpu_seconds, capacity.gpu_seconds),
    );
    // A user sees its own account only: the share column is the admin's.
    let share_of = reply.every_owner.then_some(total.core_seconds);
    let head = if share_of.is_some() {
        &["core-hours", "GPU-hours", "memory GiB-hours", "core share"][..]
    } else {
        &["core-hours", "GPU-hours", "memory GiB-hours"][..]
    };
    let mut t = if by_day {
        table(&[&["day", "user"][..], head].concat())
    } else {
        table(&[&["user"][..], head].concat())
    };
    if by_day {
        for ((d, o), h) in &sum.days {
            let mut row = vec![date(*d), o.to_string()];
            row.extend(cells(h, share_of));
            t.add_row(super::human::row(row));
        }
    } else {
        for (o, h) in &sum.owners {
            let mut row = vec![o.to_string()];
            row.extend(cells(h, share_of));
            t.add_row(super::human::row(row));
        }
    }
    let mut row = if by_day {
        vec!["total".to_string(), String::new()]
    } else {
        vec!["total".to_string()]
    };
    row.extend(cells(total, share_of));
    t.add_row(super::human::row(row));
    println!("{t}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_dates_today_or_days_ago() {
        let today = hetsched_server::accounting::today();
        assert_eq!(parse_day("1970-01-02"), Ok(1));
        assert_eq!(parse_day("today"), Ok(today));
        assert_eq!(parse_day("7d"), Ok(today - 7));
        let e = parse_day("30-11-2025").expect_err("not a day");
        assert!(e.contains("YYYY-MM-DD"), "{e}");
    }

    #[test]
    fn small_amounts_keep_three_significant_digits() {
        assert_eq!(hours(0.0), "0.00");
        assert_eq!(hours(12.345), "12.35");
        assert_eq!(hours(0.0339), "0.03");
        assert_eq!(hours(0.00339), "0.00339");
        assert_eq!(hours(0.0016853), "0.00169");
        assert_eq!(hours(0.01), "0.01");
    }

    /// Below a ten-thousandth of an hour (0.36 s) an amount is noise: it reads `<0.0001`, not
    /// `0.0000123` or twelve decimals; a large one keeps two decimals, never an exponent.
    #[test]
    fn tiny_amounts_read_as_below_the_smallest_shown() {
        assert_eq!(hours(1.2345678e-5), "<0.0001");
        assert_eq!(hours(1e-13), "<0.0001");
        assert_eq!(hours(0.0001), "0.000100");
        assert_eq!(hours(0.00012345678), "0.000123");
        assert_eq!(hours(1.5e9), "1500000000.00");
    }
}
