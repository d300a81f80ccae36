//! Human units in submitted files: sizes (`"1GiB"`, `4194304`), durations (`"23.6s"`, `"100ms"`)
//! and bandwidths (`"128MB/s"`, `"1Gb/s"`, or bytes per second as a number).
//!
//! A size's unit is read in any case (`"4gb"` is `"4GB"`, 4×10⁹ bytes): a memory or a file is
//! counted in bytes, and a lowercase `b` there has always meant one. A rate (`…/s`) is different:
//! links are sold in bits per second, and `"1Gb/s"` written for a 1 Gbit/s link read as 1 GB/s
//! made the simulated link eight times too fast. So in a rate a unit written with a lowercase `b`
//! (`kb/s`, `Mb/s`, `Gb/s`, `Tb/s`) or with `bit` (`kbit/s`, `Mbit/s`, `Gbit/s`) counts bits, an
//! eighth of a byte; `B` (`MB/s`, `GiB/s`) and a bare number count bytes. [`rate_bytes_per_sec`]
//! is the one reader of rates, shared by the simulator's cluster files and the agent's
//! configuration.

use crate::text::clip;
use crate::time::Time;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written as `"1.5s"`, `"250ms"`, `"2m"` (humantime), or a number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Duration(pub Time);

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            // Shown compactly: `1e300` written out is 301 digits.
            Raw::Secs(s) if s.is_finite() && s >= 0.0 => bounded(crate::time::secs(s), &shown(s))
                .map(Duration)
                .map_err(D::Error::custom),
            Raw::Secs(s) => Err(D::Error::custom(format!(
                "invalid duration {}: expected a non-negative number of seconds",
                shown(s)
            ))),
            Raw::Text(t) => parse_duration(&t).map(Duration).map_err(D::Error::custom),
        }
    }
}

impl Serialize for Duration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(
            &humantime::format_duration(std::time::Duration::from_nanos(self.0)).to_string(),
        )
    }
}

impl std::str::FromStr for Duration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(Duration)
    }
}

/// The longest duration a submitted file may write (ten years): longer ones are typos, and one
/// near the clock's end (`u64` nanoseconds, 584 years) would saturate every time it is added to.
pub const MAX_DURATION: Time = 10 * 365 * 24 * 3600 * crate::time::NANOS_PER_SEC;

fn parse_duration(text: &str) -> Result<Time, String> {
    bounded(
        parse_any_duration(text)?,
        &format!("`{}`", clip(text.trim())),
    )
}

/// `t` if it is at most [`MAX_DURATION`], else the error naming it as `shown`.
fn bounded(t: Time, shown: &dyn std::fmt::Display) -> Result<Time, String> {
    if t > MAX_DURATION {
        return Err(format!(
            "invalid duration {shown}: at most 10 years (87600h)"
        ));
    }
    Ok(t)
}

fn parse_any_duration(text: &str) -> Result<Time, String> {
    // humantime rejects fractional units ("23.6s"); accept them as users write them.
    let t = text.trim();
    if is_clock_form(t) {
        return parse_clock(t);
    }
    // The unit is the trailing run of letters, so an exponent stays in the number ("1e3s").
    let unit_len: usize = t
        .chars()
        .rev()
        .take_while(|c| c.is_alphabetic())
        .map(char::len_utf8)
        .sum();
    if unit_len > 0
        && let (num, unit) = t.split_at(t.len() - unit_len)
        && let Ok(value) = num.trim().parse::<f64>()
    {
        let scale = match unit.trim() {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            // Slurm's and fair share's scale (`half_life = "7d"`).
            "d" | "day" | "days" => 86_400.0,
            _ => {
                return Err(format!(
                    "invalid duration `{}`: unknown unit `{}` (use ns, us, ms, s, m, h or d)",
                    clip(text),
                    clip(unit)
                ));
            }
        };
        if value.is_finite() && value >= 0.0 {
            return Ok(crate::time::secs(value * scale));
        }
        // Said here: humantime's reading of `-5us` is `expected number at 0`, naming neither
        // the sign nor the rule.
        if value < 0.0 {
            return Err(format!(
                "invalid duration `{}`: a duration is 0 or more",
                clip(text.trim())
            ));
        }
        // An exponent past f64's ("1e400s") reads as infinity: too long, not a unit `e`.
        if value == f64::INFINITY {
            return Ok(Time::MAX);
        }
    }
    // A bare number is ambiguous: Slurm's `--time=30` means minutes, a program's `sleep 30`
    // seconds. Say both rather than humantime's "time unit needed". Zero is zero in any unit.
    if let Ok(n) = t.parse::<f64>()
        && t.chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        if n == 0.0 {
            return Ok(0);
        }
        let n = clip(t);
        return Err(format!(
            "invalid duration `{n}`: a number needs its unit: `{n}m` (what Slurm's `--time={n}` \
             means), `{n}s` or `{n}h`"
        ));
    }
    humantime::parse_duration(t)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as Time)
        .map_err(|e| {
            // humantime's error quotes the part it could not read, which may be all of it.
            format!(
                "invalid duration `{}`: {} (expected e.g. \"1.5s\" or \"250ms\")",
                clip(text),
                clip(&e.to_string())
            )
        })
}

/// Whether `t` is written as a clock (`01:00:00`, `1-12`) rather than with units: it holds a
/// `:`, or starts with digits followed by `-` (Slurm's days).
fn is_clock_form(t: &str) -> bool {
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    t.contains(':') || (digits > 0 && t[digits..].starts_with('-'))
}

/// A duration written as a clock, as Slurm's `--time` and HyperQueue's `--time-limit` take it:
/// `MM:SS`, `HH:MM:SS` (hours unbounded), `D-HH`, `D-HH:MM` or `D-HH:MM:SS`. Minutes and
/// seconds are below 60, and hours below 24 after days.
fn parse_clock(t: &str) -> Result<Time, String> {
    let invalid = |why: &str| {
        format!(
            "invalid duration `{}`: {why} (a clock is written MM:SS, HH:MM:SS, D-HH, D-HH:MM or \
             D-HH:MM:SS; or write e.g. \"90s\", \"2h30m\")",
            clip(t)
        )
    };
    let number = |field: &str| -> Result<u64, String> {
        if field.is_empty() || field.len() > 9 || !field.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid(&format!("`{}` is not a number", clip(field))));
        }
        field
            .parse::<u64>()
            .map_err(|_| invalid("a field is not a number"))
    };
    let (days, clock) = match t.split_once('-') {
        Some((d, rest)) => (Some(number(d)?), rest),
        None => (None, t),
    };
    let fields: Vec<&str> = clock.split(':').collect();
    let nums = fields
        .iter()
        .map(|f| number(f))
        .collect::<Result<Vec<u64>, String>>()?;
    let sixty = |x: u64| x < 60;
    let (h, m, s, ok) = match (days.is_some(), nums.as_slice()) {
        // Minutes unbounded before seconds alone, as Slurm's `minutes:seconds`.
        (false, &[m, s]) => (0, m, s, sixty(s)),
        (false, &[h, m, s]) => (h, m, s, sixty(m) && sixty(s)),
        (true, &[h]) => (h, 0, 0, h < 24),
        (true, &[h, m]) => (h, m, 0, h < 24 && sixty(m)),
        (true, &[h, m, s]) => (h, m, s, h < 24 && sixty(m) && sixty(s)),
        _ => return Err(invalid("too many or too few fields")),
    };
    if !ok {
        return Err(invalid(
            "minutes and seconds run from 00 to 59, and hours after days from 00 to 23",
        ));
    }
    let secs = days.unwrap_or(0) * 86_400 + h * 3600 + m * 60 + s;
    Ok(secs.saturating_mul(crate::time::NANOS_PER_SEC))
}

/// How to write a size, for every error about one.
const SIZE_HOW: &str = "write a number of bytes or a size such as \"512MiB\" or \"4GB\"";

/// A size in bytes (`memory =`, `split =`): a number of bytes, or a string such as `"512MiB"`,
/// `"4GB"`, `"1.5 GiB"`; an error says how to write one (the `bytesize` crate's says only
/// "expected parsable string").
pub fn byte_size<'de, D: Deserializer<'de>>(d: D) -> Result<bytesize::ByteSize, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(i64),
        Text(String),
    }
    match Raw::deserialize(d).map_err(|_| D::Error::custom(format!("not a size: {SIZE_HOW}")))? {
        Raw::Number(n) => u64::try_from(n)
            .map(bytesize::ByteSize)
            .map_err(|_| D::Error::custom(format!("invalid size {n}: {SIZE_HOW}"))),
        Raw::Text(t) => parse_size(&t)
            .map(bytesize::ByteSize)
            .map_err(D::Error::custom),
    }
}

/// [`byte_size`] for an optional size kept with where it is written (`max_memory`, a workflow
/// task's `memory`), so that a check after parsing can still name its line.
pub fn spanned_byte_size<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_spanned::Spanned<bytesize::ByteSize>>, D::Error> {
    let size = Option::<serde_spanned::Spanned<super::cluster::Size>>::deserialize(d)?;
    Ok(size.map(|s| serde_spanned::Spanned::new(s.span(), s.into_inner().0)))
}

/// [`byte_size`] for an optional size (`memory_per_unit`).
pub fn optional_byte_size<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<bytesize::ByteSize>, D::Error> {
    Ok(Option::<super::cluster::Size>::deserialize(d)?.map(|s| s.0))
}

/// The bytes `text` writes, as a job file's sizes read it (`"512MiB"`, `"1.5 GiB"`, `"4096"`):
/// for a flag that takes a size, so that it reads one as a job file does.
pub fn size_bytes(text: &str) -> Result<u64, String> {
    parse_size(text)
}

/// How to write a rate, for every error about one.
const RATE_HOW: &str = "not a rate: write a size per second such as \"128MB/s\" (bytes) or \
                        \"1Gb/s\" or \"1Gbit/s\" (bits)";

/// The bytes per second a rate writes (`"128MB/s"`, `"1Gb/s"`, `"10Gbit/s"`, `"1.5 GiB/s"`): its
/// size before `/s` read as a size, except that a unit with a lowercase `b` or `bit` counts bits
/// (see the module's docs for why). `None` if `text` does not end with `/s`, so that a caller
/// that also takes a bare size can read it as one. The error does not quote `text`: the caller
/// does, with the field's name for it.
pub fn rate_bytes_per_sec(text: &str) -> Option<Result<f64, String>> {
    let size = text.trim().strip_suffix("/s")?.trim_end();
    let unit_len: usize = size
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphabetic())
        .map(char::len_utf8)
        .sum();
    let (number, unit) = size.split_at(size.len() - unit_len);
    let bits_prefix = ["bits", "bit", "Bits", "Bit", "b"]
        .iter()
        .find_map(|suffix| unit.strip_suffix(suffix));
    let Some(prefix) = bits_prefix else {
        // Bytes: the size as every size is read; a unit it does not know is no rate either.
        return Some(parse_size(size).map(|b| b as f64).map_err(|e| {
            if e.ends_with(SIZE_HOW) {
                RATE_HOW.to_string()
            } else {
                e
            }
        }));
    };
    // Bits: the same prefix in bytes, an eighth of it. A number of bits need not be a whole
    // number of bytes, so this is computed in f64 rather than through `parse_size`.
    let factor = match prefix {
        "" => 1,
        p => match format!("{p}B").parse::<bytesize::Unit>() {
            Ok(u) => 1u64 * u,
            Err(_) => return Some(Err(RATE_HOW.to_string())),
        },
    };
    let number = number.trim_end();
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Some(Err(RATE_HOW.to_string()));
    }
    Some(
        number
            .parse::<f64>()
            .map(|bits| bits * factor as f64 / 8.0)
            .map_err(|_| RATE_HOW.to_string()),
    )
}

/// The bytes `text` writes (`"512MiB"`, `"1.5 GiB"`, `"4096"`). The `bytesize` crate reads the
/// same syntax but saturates a size past `u64` at 16 EiB and reads `"0.1B"` as 0, so that a typo
/// became all the memory there is, or none: both are refused here.
fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let invalid = || format!("invalid size `{}`: {SIZE_HOW}", clip(t));
    let over = || {
        format!(
            "invalid size `{}`: over 16 EiB, the most a size can be",
            clip(t)
        )
    };
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let factor = match unit.trim_start() {
        "" => 1,
        unit => 1u64 * unit.parse::<bytesize::Unit>().map_err(|_| invalid())?,
    };
    if number.is_empty() {
        return Err(invalid());
    }
    if !number.contains('.') {
        // Only digits: more than a u64 holds is too large, not malformed.
        return number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(factor))
            .ok_or_else(over);
    }
    let bytes = number.parse::<f64>().map_err(|_| invalid())? * factor as f64;
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(over());
    }
    if bytes > 0.0 && bytes < 1.0 {
        return Err(format!(
            "invalid size `{}`: below 1 byte (write 0 for none, or a whole byte or more)",
            clip(t)
        ));
    }
    Ok(bytes as u64)
}

/// `x` as a message shows it: written out when that is short, else with an exponent (`1e-300`
/// written out is 302 characters).
pub(crate) fn shown(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-3..1e9).contains(&x.abs()) {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

/// A name taken from a file as a message quotes it: [`crate::text::clip`].
pub(crate) fn name_shown(name: &str) -> String {
    crate::text::clip(name)
}

/// The slowest bandwidth a file may give, in bytes per second.
pub const MIN_BANDWIDTH: f64 = 1.0;
/// The fastest bandwidth a file may give, in bytes per second (10 TB/s, the runtime's bound on
/// an agent's registration too): a node's disk or link past it is a typo (`"1e300"`, `"128EB/s"`),
/// and reads and transfers at such rates take no time at all in the simulator.
pub const MAX_BANDWIDTH: f64 = 1e13;

/// A bandwidth in bytes per second, written `"128MB/s"`, `"1GiB/s"` or as a number of bytes/s.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Default)]
pub struct Bandwidth(pub f64);

impl<'de> Deserialize<'de> for Bandwidth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        let bytes_per_sec = match Raw::deserialize(d)? {
            Raw::Number(n) => n,
            Raw::Text(t) => rate_bytes_per_sec(&t)
                .unwrap_or_else(|| Err(RATE_HOW.to_string()))
                .map_err(|e| {
                    D::Error::custom(format!("invalid bandwidth `{}`: {e}", clip(t.trim())))
                })?,
        };
        // A rate below a byte per second is a typo, and one as small as 1e-300 made every read
        // take longer than the clock holds, an error that named neither the file nor the field.
        if bytes_per_sec.is_finite() && bytes_per_sec > MAX_BANDWIDTH {
            Err(D::Error::custom(format!(
                "invalid bandwidth {}: must be at most 10 TB/s ({MAX_BANDWIDTH:e} bytes/s)",
                shown(bytes_per_sec)
            )))
        } else if bytes_per_sec.is_finite() && bytes_per_sec >= MIN_BANDWIDTH {
            Ok(Bandwidth(bytes_per_sec))
        } else {
            Err(D::Error::custom(format!(
                "invalid bandwidth {}: must be at least 1 byte/s (e.g. \"128MB/s\")",
                shown(bytes_per_sec)
            )))
        }
    }
}

impl Serialize for Bandwidth {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

/// `signal = "USR1@2m"` (Slurm's `--signal=USR1@120`): a signal sent to a task's processes
/// `before` its time limit, so that it can save its state before it is stopped. The signal is
/// named as `kill -l` names it, with or without `SIG` (`USR1`, `SIGTERM`); without `@`, it is
/// sent 60 s before. Only these are accepted: the ones a program may catch to checkpoint or
/// wind down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarnSignal {
    /// The signal's name without `SIG`, one of [`WARN_SIGNALS`].
    pub signal: &'static str,
    /// How long before the time limit it is sent.
    pub before: Time,
}

/// The signals `signal =` may name.
pub const WARN_SIGNALS: [&str; 10] = [
    "HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "TERM", "CONT", "URG", "WINCH",
];

/// The signals `hetsched signal` may send to a running task (Slurm's `scancel --signal`): those
/// a program may catch ([`WARN_SIGNALS`]), and those that pause it, resume it or end it at once
/// (`STOP`, `TSTP`, `KILL`).
pub const TASK_SIGNALS: [&str; 13] = [
    "HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "TERM", "CONT", "URG", "WINCH", "STOP", "TSTP",
    "KILL",
];

/// The one of `known` that `name` names, as `kill -l` does, with or without `SIG`, in any case
/// (`usr1`, `SIGUSR1`).
pub fn signal_named(name: &str, known: &[&'static str]) -> Option<&'static str> {
    let name = name.trim();
    let bare = match name.get(..3) {
        Some(sig) if sig.eq_ignore_ascii_case("SIG") => &name[3..],
        _ => name,
    };
    known.iter().find(|s| s.eq_ignore_ascii_case(bare)).copied()
}

/// A signal `hetsched signal` may send ([`TASK_SIGNALS`]), or an error naming the ones it may.
pub fn task_signal(name: &str) -> Result<&'static str, String> {
    signal_named(name, &TASK_SIGNALS).ok_or_else(|| {
        format!(
            "invalid signal `{}`: expected one of {} (with or without SIG)",
            clip(name.trim()),
            TASK_SIGNALS.join(", ")
        )
    })
}

/// What `signal =` gives without `@`: Slurm's default.
pub const DEFAULT_WARN_BEFORE: Time = 60 * crate::time::NANOS_PER_SEC;

impl std::str::FromStr for WarnSignal {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, before) = match text.trim().split_once('@') {
            Some((name, before)) => (name.trim(), parse_duration(before)?),
            None => (text.trim(), DEFAULT_WARN_BEFORE),
        };
        if before < crate::time::NANOS_PER_SEC / 1_000 {
            return Err(format!(
                "`{}`: a warning at the time limit comes too late: give at least 1ms (`USR1@2m`)",
                clip(text.trim())
            ));
        }
        let signal = signal_named(name, &WARN_SIGNALS).ok_or_else(|| {
            format!(
                "invalid signal `{}` in `{}`: expected one of {} (as `USR1@2m`: the \
                     signal, then how long before the time limit)",
                clip(name),
                clip(text.trim()),
                WARN_SIGNALS.join(", ")
            )
        })?;
        Ok(WarnSignal { signal, before })
    }
}

impl<'de> Deserialize<'de> for WarnSignal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

impl Serialize for WarnSignal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!(
            "{}@{}",
            self.signal,
            humantime::format_duration(std::time::Duration::from_nanos(self.before))
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_reads_as_slurms_and_hyperqueues_clock_forms() {
        let d = |t: &str| {
            t.parse::<Duration>()
                .map(|d| d.0 / crate::time::NANOS_PER_SEC)
        };
        // HyperQueue's `HH:MM:SS`, Slurm's `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
        assert_eq!(d("01:00:00"), Ok(3600));
        assert_eq!(d("12:30:05"), Ok(12 * 3600 + 30 * 60 + 5));
        assert_eq!(d("100:00:00"), Ok(100 * 3600));
        assert_eq!(d("2:30"), Ok(150));
        assert_eq!(d("1-00:00:00"), Ok(86_400));
        assert_eq!(d("2-12"), Ok(2 * 86_400 + 12 * 3600));
        assert_eq!(d("1-2:03"), Ok(86_400 + 2 * 3600 + 180));
        assert_eq!(d(" 0:00:01 "), Ok(1));
        // Minutes and seconds past 59, too many fields, empty fields and signs are refused,
        // naming the forms taken.
        for bad in [
            "1:60:00", "1:00:60", "1:2:3:4", "1::00", ":30", "1-", "-1:00", "1-2-3", "1:-5",
            "1-24x",
        ] {
            let e = d(bad).expect_err(bad);
            assert!(e.contains(&format!("`{}`", bad.trim())), "{bad}: {e}");
            assert!(e.contains("HH:MM:SS"), "{bad}: {e}");
        }
        // Ten years at most, as every other form.
        assert!(
            d("3651-00:00:00")
                .expect_err("too long")
                .contains("at most 10 years")
        );
        // The other forms are unchanged.
        assert_eq!(d("1h30m"), Ok(5400));
        assert_eq!(d("90s"), Ok(90));
    }

    #[test]
    fn a_warning_signal_reads_as_slurms_with_a_duration() {
        let w = |t: &str| t.parse::<WarnSignal>();
        assert_eq!(
            w("USR1@2m"),
            Ok(WarnSignal {
                signal: "USR1",
                before: 120 * crate::time::NANOS_PER_SEC
            })
        );
        assert_eq!(
            w(" sigterm @ 90s "),
            Ok(WarnSignal {
                signal: "TERM",
                before: 90 * crate::time::NANOS_PER_SEC
            })
        );
        assert_eq!(w("USR2").map(|s| s.before), Ok(DEFAULT_WARN_BEFORE));
        let e = w("KILL@1m").expect_err("not catchable");
        assert!(
            e.starts_with("invalid signal `KILL` in `KILL@1m`: expected one of HUP"),
            "{e}"
        );
        assert!(
            w("USR1@soon")
                .expect_err("duration")
                .contains("invalid duration `soon`")
        );
        assert!(w("@1m").is_err());
        assert!(w("USR1@0s").expect_err("too late").contains("at least 1ms"));
        let s = serde_json::to_string(&w("USR1@2m").expect("valid")).expect("json");
        assert_eq!(s, "\"USR1@2m\"");
    }

    #[test]
    fn a_task_signal_is_named_as_kill_names_it_and_may_pause_or_kill() {
        assert_eq!(task_signal("USR1"), Ok("USR1"));
        assert_eq!(task_signal(" sigusr2 "), Ok("USR2"));
        assert_eq!(task_signal("SIGSTOP"), Ok("STOP"));
        assert_eq!(task_signal("kill"), Ok("KILL"));
        let e = task_signal("SEGV").expect_err("not one to send");
        assert!(
            e.starts_with("invalid signal `SEGV`: expected one of HUP, INT"),
            "{e}"
        );
        assert!(task_signal("").is_err());
        assert!(task_signal("SIG").is_err());
    }

    #[test]
    fn durations_accept_fractions_and_units() {
        assert_eq!(parse_duration("23.6s"), Ok(23_600_000_000));
        assert_eq!(parse_duration("250ms"), Ok(250_000_000));
        assert_eq!(parse_duration("2m"), Ok(120_000_000_000));
        // Days, as the docs' `half_life = "7d"` writes them.
        assert_eq!(
            parse_duration("7d"),
            Ok(7 * 86_400 * crate::time::NANOS_PER_SEC)
        );
        assert_eq!(parse_duration("1.5 days"), parse_duration("36h"));
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_duration("1.5e3ms"), Ok(1_500_000_000));
        assert_eq!(
            parse_duration("1h 30m"),
            Ok(5_400_000_000_000),
            "humantime's compounds"
        );
    }

    /// A bare number is refused naming both readings, Slurm's minutes and seconds, not read
    /// as either: `--time-limit 30` from a Slurm script would otherwise kill a 30-minute task
    /// after 30 s, or a 30-second one after half an hour.
    #[test]
    fn a_bare_number_is_refused_naming_slurms_minutes_and_seconds() {
        for text in ["30", " 30 ", "1.5"] {
            let e = parse_duration(text).expect_err(text);
            let n = text.trim();
            assert_eq!(
                e,
                format!(
                    "invalid duration `{n}`: a number needs its unit: `{n}m` (what Slurm's \
                     `--time={n}` means), `{n}s` or `{n}h`"
                )
            );
        }
        assert_eq!(parse_duration("30m"), Ok(1_800_000_000_000));
        assert_eq!(parse_duration("0"), Ok(0), "zero in any unit");
        assert_eq!(parse_duration("0.0"), Ok(0));
        for text in ["-2", "inf", "NaN"] {
            let e = parse_duration(text).expect_err(text);
            assert!(!e.contains("needs its unit"), "{text}: {e}");
        }
    }

    #[test]
    fn a_negative_duration_is_refused_as_negative() {
        assert_eq!(
            parse_duration("-5us"),
            Err("invalid duration `-5us`: a duration is 0 or more".to_string())
        );
        assert_eq!(
            parse_duration(" -1.5 ms"),
            Err("invalid duration `-1.5 ms`: a duration is 0 or more".to_string())
        );
        assert_eq!(parse_duration("-0s"), Ok(0));
    }

    #[test]
    fn a_duration_over_ten_years_is_refused_not_saturated() {
        assert_eq!(parse_duration("87600h"), Ok(MAX_DURATION));
        // 10⁹ hours is past the clock's end: it used to read as 584 years, silently.
        for text in ["87601h", "1000000000h", "1e300s"] {
            let e = parse_duration(text).expect_err(text);
            assert!(e.contains("at most 10 years"), "{text}: {e}");
        }
        assert!(
            parse_duration("400 years")
                .expect_err("not a unit we read")
                .contains("unknown unit `years`")
        );
        let e = parse_duration("1000000000h").expect_err("too long");
        assert_eq!(
            e,
            "invalid duration `1000000000h`: at most 10 years (87600h)"
        );
        let read = |v: &str| {
            toml::from_str::<toml::Table>(&format!("d = {v}"))
                .expect("toml")
                .get("d")
                .cloned()
                .expect("d")
                .try_into::<Duration>()
        };
        assert_eq!(read("60").map(|d| d.0), Ok(60_000_000_000));
        assert!(
            read("1e12")
                .expect_err("too long")
                .to_string()
                .contains("at most 10 years")
        );
    }

    #[test]
    fn bandwidths_read_sizes_per_second() {
        let b: Bandwidth = toml::from_str::<toml::Table>("b = \"128MiB/s\"")
            .ok()
            .and_then(|t| t.get("b").cloned())
            .and_then(|v| v.try_into().ok())
            .unwrap_or_default();
        assert_eq!(b.0, 128.0 * 1024.0 * 1024.0);
    }

    #[test]
    fn a_rate_with_a_lowercase_b_or_bit_counts_bits_and_with_b_bytes() {
        let read = |v: &str| {
            toml::from_str::<toml::Table>(&format!("b = \"{v}\""))
                .expect("toml")
                .get("b")
                .cloned()
                .expect("b")
                .try_into::<Bandwidth>()
                .map(|b| b.0)
                .map_err(|e| e.to_string())
        };
        // The network convention: a lowercase b is a bit.
        assert_eq!(read("1Gb/s"), Ok(125e6));
        assert_eq!(read("1Gbit/s"), Ok(125e6));
        assert_eq!(read("10 Gbit/s"), Ok(1.25e9));
        assert_eq!(read("100Mb/s"), Ok(12.5e6));
        assert_eq!(read("100Mbit/s"), Ok(12.5e6));
        assert_eq!(read("800kb/s"), Ok(1e5));
        assert_eq!(read("800kbit/s"), Ok(1e5));
        assert_eq!(read("1.5Gb/s"), Ok(187.5e6));
        assert_eq!(read("8b/s"), Ok(1.0));
        // An uppercase B, a binary unit and a bare number are bytes, as before.
        assert_eq!(read("1GB/s"), Ok(1e9));
        assert_eq!(read("125MB/s"), Ok(125e6));
        assert_eq!(read("1GiB/s"), Ok(1024.0 * 1024.0 * 1024.0));
        assert_eq!(read("128MiB/s"), Ok(128.0 * 1024.0 * 1024.0));
        assert_eq!(read("1000/s"), Ok(1000.0));
        // The bounds apply to what the bits come to.
        assert!(
            read("4b/s")
                .expect_err("half a byte")
                .contains("at least 1 byte/s")
        );
        assert_eq!(read("80Tb/s"), Ok(MAX_BANDWIDTH));
        assert!(
            read("100Tb/s")
                .expect_err("12.5 TB/s")
                .contains("at most 10 TB/s")
        );
        for bad in ["1Gbx/s", "1Qb/s", "b/s", "1Gbit", "-1Gb/s", "1..2Gb/s"] {
            let e = read(bad).expect_err(bad);
            assert!(
                e.contains(&format!("invalid bandwidth `{bad}`")),
                "{bad}: {e}"
            );
        }
        assert!(
            read("1Gbx/s")
                .expect_err("no unit")
                .contains("\"1Gb/s\" or \"1Gbit/s\" (bits)")
        );
        // Sizes keep their meaning: a lowercase b in a size is a byte.
        assert_eq!(parse_size("4Gb"), Ok(4_000_000_000));
        assert_eq!(parse_size("4G"), Ok(4_000_000_000));
    }
}
