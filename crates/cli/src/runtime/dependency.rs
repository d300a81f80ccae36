//! `submit --dependency SPEC`: Slurm's `--dependency` syntax, read into hetsched's own flags, so
//! that a script written for `sbatch` keeps its line. `afterok:7:8` is `--after 7,8`,
//! `afterany:7` is `--after-any 7`, `afternotok:7` is `--after-notok 7`, `aftercorr:7` is
//! `--after-corr 7`, `after:7` is `--after-start 7`, `singleton` is `--singleton`; several,
//! separated by commas, must all hold (`afterok:7,afternotok:8`). Slurm's other kinds
//! (`afterburstbuffer`, `expand`) and `?` (any one of them) are refused, naming what is not
//! supported.

use super::client::JobRef;

/// The jobs a `--dependency` names, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependency {
    /// `afterok`: once each completed (`--after`).
    pub after: Vec<JobRef>,
    /// `afterany`: once each ended, however (`--after-any`).
    pub after_any: Vec<JobRef>,
    /// `afternotok`: once each failed or was cancelled (`--after-notok`).
    pub after_notok: Vec<JobRef>,
    /// `aftercorr`: each task once the tasks of the same index succeeded (`--after-corr`).
    pub after_corr: Vec<JobRef>,
    /// `singleton`: once every unfinished job of its name ended (`--singleton`).
    pub singleton: bool,
    /// `after`: once each started (`--after-start`).
    pub after_start: Vec<JobRef>,
}

impl std::str::FromStr for Dependency {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        if spec.contains('?') {
            return Err(format!(
                "`{spec}`: `?` (any one of them) is not supported: every dependency must hold; \
                 use `,`"
            ));
        }
        let mut d = Dependency::default();
        for part in spec.split(',') {
            let part = part.trim();
            let (kind, jobs) = part.split_once(':').unwrap_or((part, ""));
            if kind == "singleton" {
                if !jobs.is_empty() {
                    return Err(format!("`{part}`: `singleton` names no job"));
                }
                d.singleton = true;
                continue;
            }
            let list = match kind {
                "afterok" => &mut d.after,
                "afterany" => &mut d.after_any,
                "afternotok" => &mut d.after_notok,
                "aftercorr" => &mut d.after_corr,
                "after" => &mut d.after_start,
                "" => {
                    return Err(format!(
                        "`{spec}`: an empty dependency (two commas in a row?)"
                    ));
                }
                "afterburstbuffer" | "expand" => {
                    return Err(format!(
                        "`{part}`: Slurm's `{kind}` is not supported; give after, afterok, \
                         afterany, afternotok, aftercorr or singleton"
                    ));
                }
                other => {
                    return Err(format!(
                        "`{part}`: unknown dependency `{other}`; give after:JOB, afterok:JOB, \
                         afterany:JOB, afternotok:JOB, aftercorr:JOB or singleton"
                    ));
                }
            };
            if jobs.is_empty() {
                return Err(format!("`{part}`: name a job after `{kind}:`"));
            }
            for job in jobs.split(':') {
                // Slurm's `+TIME` after a job id (a delay) has no counterpart.
                if job.contains('+') {
                    return Err(format!(
                        "`{part}`: a delay after a job (`+TIME`) is not supported"
                    ));
                }
                list.push(job.trim().parse().map_err(|e| format!("`{part}`: {e}"))?);
            }
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::{Dependency, JobRef};

    #[test]
    fn slurm_dependencies_read_as_the_after_flags() {
        let d: Dependency = "afterok:7:8,afterany:9,afternotok:last,aftercorr:5"
            .parse()
            .expect("valid");
        assert_eq!(d.after, [JobRef::Id(7), JobRef::Id(8)]);
        assert_eq!(d.after_any, [JobRef::Id(9)]);
        assert_eq!(d.after_notok, [JobRef::Last]);
        assert_eq!(d.after_corr, [JobRef::Id(5)]);
    }

    #[test]
    fn what_hetsched_does_not_do_is_refused_by_name() {
        let err = |s: &str| s.parse::<Dependency>().expect_err(s);
        assert!(err("afterok:7?afterany:8").contains("`?` (any one of them) is not supported"));
        assert!(err("singleton:4").contains("`singleton` names no job"));
        assert!(
            "afterok:3,singleton"
                .parse::<Dependency>()
                .expect("valid")
                .singleton
        );
        assert!(err("expand:5").contains("Slurm's `expand` is not supported"));
        assert_eq!(
            "after:5".parse::<Dependency>().expect("valid").after_start,
            [JobRef::Id(5)]
        );
        assert!(err("afterok:5+10").contains("a delay after a job"));
        assert!(err("afterok").contains("name a job after `afterok:`"));
        assert!(err("afterok:x").contains("`x` is not a job id"));
        assert!(err("afterwards:3").contains("unknown dependency `afterwards`"));
        assert!(err("afterok:3,,afterany:4").contains("an empty dependency"));
    }
}
