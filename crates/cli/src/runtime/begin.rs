//! `--begin TIME` (Slurm's `--begin`): when a batch job's tasks may start. The time is resolved
//! here, on the submitting side and in its local time zone, to milliseconds since the Unix
//! epoch; the server keeps that instant and dispatches none of the job's tasks before it.
//!
//! Accepted, as Slurm accepts them: `now` and `now+DURATION` (`now+90s`, `now+2h`, `now+1h30m`;
//! a bare number is seconds, `now+60`); a time of day `HH:MM[:SS]` (today, or tomorrow if it has
//! passed); `midnight`, `noon`, `fika` (15:00) and `teatime` (16:00), the next such time;
//! `today` and `tomorrow` (their midnight); a date `YYYY-MM-DD` (its midnight), a date and time
//! `YYYY-MM-DDTHH:MM[:SS]` (or with a space), all in local time; and RFC 3339 with an offset
//! (`2026-12-01T08:00:00Z`, `…+01:00`).

use jiff::civil::{DateTime, Time};
use jiff::{SignedDuration, Timestamp, Zoned};

/// What an error shows as the accepted forms.
const FORMS: &str = "`now+30m`, `16:00`, `tomorrow`, `2026-12-01`, `2026-12-01T08:00` or \
                     `2026-12-01T08:00:00Z`";

/// `--begin TIME` as ms since the Unix epoch, read against the clock and the local time zone.
pub fn parse(s: &str) -> Result<u64, String> {
    parse_at(s, &Zoned::now())
}

/// `--begin TIME` as ms since the Unix epoch, read against `now` (its time zone is the local
/// one for the forms without an offset).
pub fn parse_at(s: &str, now: &Zoned) -> Result<u64, String> {
    let t = s.trim();
    let at = resolve(t, now)?;
    u64::try_from(at.as_millisecond())
        .map_err(|_| format!("`{t}` is before 1970: give a time to come ({FORMS})"))
}

fn resolve(t: &str, now: &Zoned) -> Result<Timestamp, String> {
    let bad = || format!("`{t}` is not a time: give {FORMS}");
    let lower = t.to_ascii_lowercase();
    if lower == "now" {
        return Ok(now.timestamp());
    }
    if let Some(rest) = lower.strip_prefix("now+") {
        let rest = rest.trim();
        let ns: u64 = if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
            let secs: u64 = rest.parse().map_err(|_| bad())?;
            secs.checked_mul(1_000_000_000).ok_or_else(bad)?
        } else {
            let d: hetsched_core::input::Duration =
                rest.parse().map_err(|e: String| format!("`{t}`: {e}"))?;
            d.0
        };
        let span = SignedDuration::from_nanos(i64::try_from(ns).map_err(|_| bad())?);
        return now.timestamp().checked_add(span).map_err(|_| bad());
    }
    // The next occurrence of a time of day: today's, or tomorrow's once it has passed.
    let next = |time: Time| -> Result<Timestamp, String> {
        let today = now.date().to_datetime(time);
        let z = local(today, now)?;
        if z.timestamp() > now.timestamp() {
            return Ok(z.timestamp());
        }
        let tomorrow = now.date().tomorrow().map_err(|e| e.to_string())?;
        Ok(local(tomorrow.to_datetime(time), now)?.timestamp())
    };
    match lower.as_str() {
        "midnight" => return next(Time::midnight()),
        "noon" => return next(Time::constant(12, 0, 0, 0)),
        "fika" => return next(Time::constant(15, 0, 0, 0)),
        "teatime" => return next(Time::constant(16, 0, 0, 0)),
        "today" => return Ok(local(now.date().to_datetime(Time::midnight()), now)?.timestamp()),
        "tomorrow" => {
            let d = now.date().tomorrow().map_err(|e| e.to_string())?;
            return Ok(local(d.to_datetime(Time::midnight()), now)?.timestamp());
        }
        _ => {}
    }
    // With an offset (`Z`, `+01:00`): an instant as written.
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts);
    }
    let iso = t.replacen(' ', "T", 1);
    if t.contains('-') {
        // A date alone is its midnight.
        if let Ok(dt) = iso.parse::<DateTime>() {
            return Ok(local(dt, now)?.timestamp());
        }
        return Err(bad());
    }
    if t.contains(':')
        && let Ok(time) = t.parse::<Time>()
    {
        return next(time);
    }
    Err(bad())
}

/// The clock, in ms since the Unix epoch.
pub fn now_ms() -> u64 {
    u64::try_from(Timestamp::now().as_millisecond()).unwrap_or(0)
}

/// A begin time (ms since the Unix epoch) as people read it: the local date and time, and how
/// far from now (`2026-11-29 18:00:00 CET (in 29m 59s)`).
pub fn describe(ms: u64) -> String {
    describe_at(ms, &Zoned::now())
}

fn describe_at(ms: u64, now: &Zoned) -> String {
    let Ok(ts) = Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX)) else {
        return format!("{ms} ms since 1970");
    };
    let at = ts.to_zoned(now.time_zone().clone());
    let now_ms = u64::try_from(now.timestamp().as_millisecond()).unwrap_or(0);
    let off = |d: u64| humantime::format_duration(std::time::Duration::from_secs(d / 1000));
    let when = if ms > now_ms {
        format!("in {}", off(ms - now_ms + 999))
    } else if now_ms - ms < 1000 {
        "now".to_string()
    } else {
        format!("{} ago", off(now_ms - ms))
    };
    format!("{} ({when})", at.strftime("%Y-%m-%d %H:%M:%S %Z"))
}

/// A civil date and time in `now`'s time zone (a time a clock change skips moves forward).
fn local(dt: DateTime, now: &Zoned) -> Result<Zoned, String> {
    dt.to_zoned(now.time_zone().clone())
        .map_err(|e| format!("{dt}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{describe_at, parse_at};
    use jiff::Zoned;

    /// 2026-11-29 17:30:00 at UTC+01:00 (a fixed offset: no time zone database needed).
    fn now() -> Zoned {
        "2026-11-29T17:30:00+01:00[+01:00]"
            .parse()
            .expect("a zoned time")
    }

    fn ms(rfc3339: &str) -> u64 {
        rfc3339
            .parse::<jiff::Timestamp>()
            .expect("RFC 3339")
            .as_millisecond() as u64
    }

    #[test]
    fn relative_times_count_from_now() {
        assert_eq!(parse_at("now", &now()), Ok(ms("2026-11-29T16:30:00Z")));
        assert_eq!(parse_at("now+90s", &now()), Ok(ms("2026-11-29T16:31:30Z")));
        assert_eq!(
            parse_at("now+1h30m", &now()),
            Ok(ms("2026-11-29T18:00:00Z"))
        );
        assert_eq!(parse_at("now+60", &now()), Ok(ms("2026-11-29T16:31:00Z")));
        assert_eq!(parse_at("NOW+2h", &now()), Ok(ms("2026-11-29T18:30:00Z")));
    }

    #[test]
    fn a_time_of_day_is_its_next_occurrence_in_local_time() {
        // 18:00 has not come: today; 09:15 has passed: tomorrow.
        assert_eq!(parse_at("18:00", &now()), Ok(ms("2026-11-29T17:00:00Z")));
        assert_eq!(parse_at("09:15:30", &now()), Ok(ms("2026-11-30T08:15:30Z")));
        assert_eq!(parse_at("midnight", &now()), Ok(ms("2026-11-29T23:00:00Z")));
        assert_eq!(parse_at("noon", &now()), Ok(ms("2026-11-30T11:00:00Z")));
        assert_eq!(parse_at("teatime", &now()), Ok(ms("2026-11-30T15:00:00Z")));
        assert_eq!(parse_at("tomorrow", &now()), Ok(ms("2026-11-29T23:00:00Z")));
        assert_eq!(parse_at("today", &now()), Ok(ms("2026-11-28T23:00:00Z")));
    }

    #[test]
    fn dates_are_local_unless_they_carry_an_offset() {
        assert_eq!(
            parse_at("2026-12-01", &now()),
            Ok(ms("2026-11-30T23:00:00Z"))
        );
        assert_eq!(
            parse_at("2026-12-01T08:00", &now()),
            Ok(ms("2026-12-01T07:00:00Z"))
        );
        assert_eq!(
            parse_at("2026-12-01 08:00:30", &now()),
            Ok(ms("2026-12-01T07:00:30Z"))
        );
        assert_eq!(
            parse_at("2026-12-01T08:00:00Z", &now()),
            Ok(ms("2026-12-01T08:00:00Z"))
        );
        assert_eq!(
            parse_at("2026-12-01T08:00:00-05:00", &now()),
            Ok(ms("2026-12-01T13:00:00Z"))
        );
    }

    #[test]
    fn a_begin_time_reads_in_local_time_with_how_far_off() {
        assert_eq!(
            describe_at(ms("2026-11-29T17:00:00Z"), &now()),
            "2026-11-29 18:00:00 +01 (in 30m)"
        );
        assert_eq!(
            describe_at(ms("2026-11-29T16:00:00Z"), &now()),
            "2026-11-29 17:00:00 +01 (30m ago)"
        );
    }

    #[test]
    fn what_is_not_a_time_is_refused_with_the_accepted_forms() {
        for bad in [
            "soon",
            "now+",
            "now+ever",
            "25:00",
            "2026-13-01",
            "1700",
            "",
        ] {
            let e = parse_at(bad, &now()).expect_err("refused");
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
        let e = parse_at("tuesday", &now()).expect_err("refused");
        assert!(
            e.contains("now+30m") && e.contains("2026-12-01T08:00"),
            "{e}"
        );
        assert!(
            parse_at("1969-07-20T20:17:00Z", &now())
                .expect_err("refused")
                .contains("before 1970")
        );
    }
}
