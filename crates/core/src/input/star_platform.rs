//! Star-platform files (TOML) for divisible loads (spec 03): one `[[worker]]` table per worker
//! with `name`, `speed` (load units/s), `compute_latency` (s), `bandwidth` (load units/s on the
//! worker's link), `network_latency` (s) and optional `memory` (load units; unlimited if absent).
//! A latency is at most [`MAX_SCHEDULE_SECS`] (100 years): no schedule that pays it can be
//! simulated. A speed or a bandwidth is within [`RATE_RANGE`] load units per second.
//! See `docs/divisible.md` and `examples/platform-divisible-paper.toml`.

use super::cluster::at;
use super::{InputError, Source};
use crate::policy::divisible::{MAX_SCHEDULE_SECS, StarPlatform, StarWorker};
use serde::Deserialize;
use serde_spanned::Spanned;
use std::collections::HashMap;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlatformFile {
    #[serde(default)]
    worker: Vec<WorkerSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerSpec {
    name: Spanned<String>,
    speed: Spanned<f64>,
    compute_latency: Spanned<f64>,
    bandwidth: Spanned<f64>,
    network_latency: Spanned<f64>,
    memory: Option<Spanned<f64>>,
}

/// The range of a worker's `speed` and `bandwidth`, in load units per second. Not the cluster
/// files' `core_speed` range (0.001 to 1000, relative to a reference core): these are absolute
/// rates in the file's own unit, a matrix row or a byte, so `bandwidth = 1041.67` rows/s (the
/// paper's platform) and 2e6 units/s (`scripts/simgrid-divisible.sh`) are real. The bounds keep
/// out what is a typo in any unit: below one unit in about 12 days (1e-6), a speed made one unit
/// longer than a plan can wait for; above a trillion units per second (1e12), `1e300` made every
/// chunk take 0 ns and W/ΣS print as 0.
pub const RATE_RANGE: std::ops::RangeInclusive<f64> = 1e-6..=1e12;

/// Parses a star-platform file into a validated [`StarPlatform`].
pub fn parse_star_platform(origin: &str, text: &str) -> Result<StarPlatform, InputError> {
    let src = Source::new(origin, text);
    let file: PlatformFile = src.parse_toml()?;
    if file.worker.is_empty() {
        return Err(src.error(
            None,
            Some("worker".into()),
            "the platform has no workers: add at least one [[worker]] table",
        ));
    }
    let mut names = HashMap::new();
    let mut workers = Vec::with_capacity(file.worker.len());
    for (i, w) in file.worker.iter().enumerate() {
        let field = |f: &str| Some(format!("worker[{i}].{f}"));
        let shown = super::units::shown;
        let positive = |v: &Spanned<f64>, f: &str| -> Result<f64, InputError> {
            let x = *v.get_ref();
            if x.is_finite() && x > 0.0 {
                Ok(x)
            } else {
                Err(src.error(
                    at(v),
                    field(f),
                    format!("must be a positive number, got {}", shown(x)),
                ))
            }
        };
        let rate = |v: &Spanned<f64>, f: &str| -> Result<f64, InputError> {
            let x = positive(v, f)?;
            if RATE_RANGE.contains(&x) {
                Ok(x)
            } else {
                Err(src.error(
                    at(v),
                    field(f),
                    format!(
                        "must be between {} and {} load units per second; got {}",
                        shown(*RATE_RANGE.start()),
                        shown(*RATE_RANGE.end()),
                        shown(x)
                    ),
                ))
            }
        };
        let non_negative = |v: &Spanned<f64>, f: &str| -> Result<f64, InputError> {
            let x = *v.get_ref();
            if x.is_finite() && x > MAX_SCHEDULE_SECS {
                Err(src.error(
                    at(v),
                    field(f),
                    format!(
                        "must be at most {MAX_SCHEDULE_SECS} seconds (100 years, the longest \
                         schedule the simulator holds), got {}",
                        shown(x)
                    ),
                ))
            } else if x.is_finite() && x >= 0.0 {
                Ok(x)
            } else {
                Err(src.error(
                    at(v),
                    field(f),
                    format!("must be a non-negative number of seconds, got {}", shown(x)),
                ))
            }
        };
        let name = w.name.get_ref().clone();
        // A worker is a machine, named as a node is: the simulator's tables print the name as
        // written, so a control character would act on the terminal.
        if let Some(problem) = super::cluster::node_name_problem(&name) {
            return Err(src.error(at(&w.name), field("name"), problem));
        }
        if let Some(first) = names.insert(name.clone(), i) {
            return Err(src.error(
                at(&w.name),
                field("name"),
                format!("worker name `{name}` is already used by worker[{first}]"),
            ));
        }
        workers.push(StarWorker {
            name,
            speed: rate(&w.speed, "speed")?,
            compute_latency: non_negative(&w.compute_latency, "compute_latency")?,
            bandwidth: rate(&w.bandwidth, "bandwidth")?,
            network_latency: non_negative(&w.network_latency, "network_latency")?,
            memory: w
                .memory
                .as_ref()
                .map(|m| positive(m, "memory"))
                .transpose()?,
        });
    }
    Ok(StarPlatform { workers })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[[worker]]
name = "p4-3.0a"
speed = 120.0            # load units per second
compute_latency = 0.01   # seconds
bandwidth = 800.0        # load units per second on this worker's link
network_latency = 0.001  # seconds
memory = 1100.0          # load units it can hold

[[worker]]
name = "p4-2.0"
speed = 80.0
compute_latency = 0.01
bandwidth = 800.0
network_latency = 0.001
"#;

    #[test]
    fn the_issue_example_parses_and_memory_is_optional() {
        let p = parse_star_platform("p.toml", GOOD).expect("parses");
        assert_eq!(p.workers.len(), 2);
        assert_eq!(p.workers[0].name, "p4-3.0a");
        assert_eq!(p.workers[0].memory, Some(1100.0));
        assert_eq!(p.workers[1].memory, None);
        assert_eq!(p.workers[1].speed, 80.0);
    }

    /// A speed or a bandwidth is a rate in load units per second, bounded to [`RATE_RANGE`]
    /// (`1e300` made every chunk take 0 ns; `1e-300`, one unit longer than any plan), and a
    /// refused number is echoed compactly.
    #[test]
    fn an_absurd_rate_is_refused_at_its_line_with_the_range() {
        let refused = |from: &str, to: &str| {
            parse_star_platform("p.toml", &GOOD.replace(from, to))
                .expect_err("refused")
                .to_string()
        };
        for (speed, shown) in [("1e300", "1e300"), ("1e-300", "1e-300"), ("2e12", "2e12")] {
            assert_eq!(
                refused("speed = 80.0", &format!("speed = {speed}")),
                format!(
                    "p.toml:12:9: worker[1].speed: must be between 1e-6 and 1e12 load units per \
                     second; got {shown}"
                )
            );
        }
        assert_eq!(
            refused("bandwidth = 800.0        #", "bandwidth = 1e-9 #"),
            "p.toml:6:13: worker[0].bandwidth: must be between 1e-6 and 1e12 load units per \
             second; got 1e-9"
        );
        assert_eq!(
            refused("compute_latency = 0.01   #", "compute_latency = 1e300 #"),
            "p.toml:5:19: worker[0].compute_latency: must be at most 3153600000 seconds (100 \
             years, the longest schedule the simulator holds), got 1e300"
        );
        assert_eq!(
            refused("network_latency = 0.001  #", "network_latency = -1e300 #"),
            "p.toml:7:19: worker[0].network_latency: must be a non-negative number of seconds, \
             got -1e300"
        );
        assert_eq!(
            refused("memory = 1100.0 ", "memory = -1e-300 "),
            "p.toml:8:10: worker[0].memory: must be a positive number, got -1e-300"
        );
        // The bounds themselves, and the paper platform's scale (bandwidth 1041.67 units/s).
        let edge = GOOD
            .replace("speed = 80.0", "speed = 1e-6")
            .replace("speed = 120.0", "speed = 1e12")
            .replace(
                "bandwidth = 800.0        #",
                "bandwidth = 1041.6666666666667 #",
            );
        parse_star_platform("p.toml", &edge).expect("within the bounds");
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = GOOD.replace("speed = 80.0", "speed = -3.0");
        let e = parse_star_platform("p.toml", &bad)
            .expect_err("refused")
            .to_string();
        assert!(e.starts_with("p.toml:12:"), "{e}");
        assert!(
            e.contains("worker[1].speed: must be a positive number, got -3"),
            "{e}"
        );

        let bad = GOOD.replace("bandwidth = 800.0        #", "bandwidth = 0.0 #");
        let e = parse_star_platform("p.toml", &bad)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains(":6:") && e.contains("worker[0].bandwidth: must be a positive number"),
            "{e}"
        );

        let bad = GOOD.replace(
            "network_latency = 0.001\n",
            "network_latency = 0.001\nlatency = 2\n",
        );
        let e = parse_star_platform("p.toml", &bad)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("p.toml:16:") && e.contains("unknown field `latency`"),
            "{e}"
        );

        let bad = GOOD.replace("speed = 80.0\n", "");
        let e = parse_star_platform("p.toml", &bad)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("missing field `speed`"), "{e}");

        let e = parse_star_platform("p.toml", "# nothing\n")
            .expect_err("refused")
            .to_string();
        assert_eq!(
            e,
            "p.toml: worker: the platform has no workers: add at least one [[worker]] table"
        );

        let bad = GOOD.replace("compute_latency = 0.01   #", "compute_latency = 1e300 #");
        let e = parse_star_platform("p.toml", &bad)
            .expect_err("refused")
            .to_string();
        assert!(
            e.starts_with("p.toml:5:")
                && e.contains("worker[0].compute_latency: must be at most 3153600000 seconds"),
            "{e}"
        );

        let bad = GOOD.replace("p4-2.0", "p4-3.0a");
        let e = parse_star_platform("p.toml", &bad)
            .expect_err("refused")
            .to_string();
        assert!(
            e.contains("worker[1].name: worker name `p4-3.0a` is already used by worker[0]"),
            "{e}"
        );
    }
}
