//! `#HETSCHED` lines in a job script: `hetsched submit -- ./job.sh` reads submit flags from the
//! script's header, as `sbatch` reads `#SBATCH` lines and HyperQueue's `--directives` reads
//! `#HQ` lines, so a script carries what it needs:
//!
//! ```sh
//! #!/bin/sh
//! #HETSCHED --array 1-100%10 --cores 4 --time-limit 1h
//! #HETSCHED --name sweep --env OMP_PROC_BIND=true
//! ./simulate --seed "$HETSCHED_TASK_INDEX"
//! ```
//!
//! The header is the lines before the first one that is neither blank nor a comment (the `#!`
//! line included); each `#HETSCHED` line there is split as a shell splits words. Flags typed on
//! the command line win over the script's (a list — `--env`, `--requires`, `--after` — takes
//! both, the script's first). `--directives auto` (the default) reads a program whose name ends
//! in `.sh`, `file` reads the program whatever its name, `off` reads nothing; `--shell` commands
//! are never read. Only the script's first [`MAX_HEADER_BYTES`] are read.

use super::client::JobRef;
use super::command_job::CommandJobArgs;
use anyhow::{Context, anyhow, bail};
use clap::{Parser, ValueEnum};
use std::io::Read;
use std::path::Path;

/// The prefix of a directive line.
pub const PREFIX: &str = "#HETSCHED";

/// How much of a script is read for its header.
pub const MAX_HEADER_BYTES: u64 = 64 << 10;

/// Whether `hetsched submit -- PROGRAM …` reads `#HETSCHED` lines from PROGRAM.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// When PROGRAM's name ends in `.sh`.
    #[default]
    Auto,
    /// Always: PROGRAM must be a readable file.
    File,
    /// Never.
    Off,
}

/// What `#HETSCHED` lines may set: the command-line job's flags, and the job's name, its
/// `--after` and `--after-any` jobs, `--hold` and `--begin`.
#[derive(Debug, Default, Parser)]
#[command(name = PREFIX, no_binary_name = true, disable_help_flag = true)]
pub struct Directives {
    /// The job's name.
    #[arg(long)]
    pub name: Option<String>,
    /// Run after these batch jobs.
    #[arg(long, value_name = "JOB", value_delimiter = ',')]
    pub after: Vec<JobRef>,
    /// Run after these batch jobs have ended, however they ended.
    #[arg(long, value_name = "JOB", value_delimiter = ',')]
    pub after_any: Vec<JobRef>,
    /// Run after these batch jobs have failed or were cancelled.
    #[arg(long, value_name = "JOB", value_delimiter = ',')]
    pub after_notok: Vec<JobRef>,
    /// Each task after these batch jobs' tasks of the same index.
    #[arg(long, value_name = "JOB", value_delimiter = ',')]
    pub after_corr: Vec<JobRef>,
    /// After every unfinished job of its name.
    #[arg(long)]
    pub singleton: bool,
    /// Run after these batch jobs have started.
    #[arg(long, value_name = "JOB", value_delimiter = ',')]
    pub after_start: Vec<JobRef>,
    /// Slurm's `--dependency` syntax.
    #[arg(long, value_name = "SPEC")]
    pub dependency: Vec<super::dependency::Dependency>,
    /// Submit the job held.
    #[arg(long)]
    pub hold: bool,
    /// Start its tasks no sooner than this time.
    #[arg(long, value_name = "TIME", value_parser = super::begin::parse)]
    pub begin: Option<u64>,
    #[command(flatten)]
    pub job: CommandJobArgs,
}

/// The command line's lists of the jobs a job runs after, which `#HETSCHED` lines add to.
pub struct Named<'a> {
    /// `--after`.
    pub after: &'a mut Vec<JobRef>,
    /// `--after-any`.
    pub after_any: &'a mut Vec<JobRef>,
    /// `--after-notok` (and `--dependency`'s, read into the four).
    pub after_notok: &'a mut Vec<JobRef>,
    /// `--after-corr`.
    pub after_corr: &'a mut Vec<JobRef>,
    /// `--singleton`.
    pub singleton: &'a mut bool,
    /// `--after-start`.
    pub after_start: &'a mut Vec<JobRef>,
}

/// The directives of `command`'s program under `mode`, if it is to be read (`shell`: the
/// command is a shell line, never read).
pub fn of_command(mode: Mode, command: &[String], shell: bool) -> anyhow::Result<Directives> {
    let Some(program) = command.first() else {
        return Ok(Directives::default());
    };
    let read = match mode {
        Mode::Off => false,
        _ if shell => false,
        Mode::File => true,
        Mode::Auto => program.ends_with(".sh") && Path::new(program).is_file(),
    };
    if !read {
        return Ok(Directives::default());
    }
    let mut head = Vec::new();
    std::fs::File::open(program)
        .and_then(|f| f.take(MAX_HEADER_BYTES).read_to_end(&mut head))
        .with_context(|| format!("{program}: cannot read its #HETSCHED lines (--directives)"))?;
    parse(program, &String::from_utf8_lossy(&head))
}

/// The directives in `text`'s header (`file` names it in errors, with the line).
pub fn parse(file: &str, text: &str) -> anyhow::Result<Directives> {
    let mut words = Vec::new();
    // An editor's byte-order mark before the `#!` line is not a command.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') {
            break; // the first command: the header ends
        }
        let Some(args) = line.strip_prefix(PREFIX) else {
            continue; // a comment, or the `#!` line
        };
        if !args.is_empty() && !args.starts_with(char::is_whitespace) {
            continue; // `#HETSCHEDULE…`: another word
        }
        let split = shlex::split(args)
            .ok_or_else(|| anyhow!("{file}:{}: {PREFIX}: unbalanced quotes", i + 1))?;
        // Each line alone first, so that a mistake names its line.
        Directives::try_parse_from(&split)
            .map_err(|e| anyhow!("{file}:{}: {PREFIX}: {}", i + 1, first_line(&e)))?;
        words.extend(split);
    }
    Directives::try_parse_from(&words)
        .map_err(|e| anyhow!("{file}: {PREFIX} lines: {}", first_line(&e)))
}

/// clap's message without its usage lines.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

impl Directives {
    /// Takes what the command line did not set from `self`: `name`, the jobs it runs after,
    /// `hold`, `begin` and `job` are the command line's, changed in place.
    pub fn fill(
        self,
        name: &mut Option<String>,
        named: &mut Named<'_>,
        hold: &mut bool,
        begin: &mut Option<u64>,
        job: &mut CommandJobArgs,
    ) -> anyhow::Result<()> {
        let Directives {
            name: d_name,
            after: mut d_after,
            after_any: mut d_after_any,
            after_notok: mut d_after_notok,
            after_corr: mut d_after_corr,
            singleton: d_singleton,
            after_start: mut d_after_start,
            dependency,
            hold: d_hold,
            begin: d_begin,
            job: d,
        } = self;
        if name.is_none() {
            *name = d_name;
        }
        if begin.is_none() {
            *begin = d_begin;
        }
        for dep in dependency {
            d_after.extend(dep.after);
            d_after_any.extend(dep.after_any);
            d_after_notok.extend(dep.after_notok);
            d_after_corr.extend(dep.after_corr);
            *named.singleton |= dep.singleton;
            d_after_start.extend(dep.after_start);
        }
        prepend(named.after_start, d_after_start);
        *named.singleton |= d_singleton;
        prepend(named.after, d_after);
        prepend(named.after_any, d_after_any);
        prepend(named.after_notok, d_after_notok);
        prepend(named.after_corr, d_after_corr);
        *hold |= d_hold;
        // Every field, so that a new flag cannot be forgotten here.
        let CommandJobArgs {
            tasks,
            each_line,
            array,
            cores,
            memory,
            gpus,
            kind,
            nodes,
            requires,
            exclude,
            time_limit,
            kill_grace,
            signal,
            retries,
            max_running,
            priority,
            env,
            workdir,
            stdout,
            stderr,
            pin,
            app,
            shell,
        } = d;
        if shell {
            bail!("--shell cannot be a {PREFIX} line: the script is the program");
        }
        // One way to say how many tasks: the command line's, if it gave one.
        let counted = job.tasks.is_some() || job.each_line.is_some() || job.array.is_some();
        if !counted {
            job.tasks = tasks;
            job.each_line = each_line;
            job.array = array;
        }
        or(&mut job.cores, cores);
        or(&mut job.memory, memory);
        or(&mut job.gpus, gpus);
        or(&mut job.kind, kind);
        or(&mut job.nodes, nodes);
        prepend(&mut job.requires, requires);
        prepend(&mut job.exclude, exclude);
        or(&mut job.time_limit, time_limit);
        or(&mut job.kill_grace, kill_grace);
        or(&mut job.signal, signal);
        or(&mut job.retries, retries);
        or(&mut job.max_running, max_running);
        or(&mut job.priority, priority);
        prepend(&mut job.env, env);
        or(&mut job.workdir, workdir);
        or(&mut job.stdout, stdout);
        or(&mut job.stderr, stderr);
        job.pin |= pin;
        or(&mut job.app, app);
        Ok(())
    }
}

/// Sets `value` to `default` unless it is set.
fn or<T>(value: &mut Option<T>, default: Option<T>) {
    if value.is_none() {
        *value = default;
    }
}

/// Puts `first` before `list`.
fn prepend<T>(list: &mut Vec<T>, mut first: Vec<T>) {
    first.append(list);
    *list = first;
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    #[test]
    fn the_header_ends_at_the_first_command_and_each_line_is_split_as_a_shell_splits() {
        let d = parse(
            "job.sh",
            "#!/bin/sh\n\n# a comment\n#HETSCHED --tasks 4 --cores 2\n#HETSCHEDULER is not one\n\
             #HETSCHED --name 'my sweep' --env A=1\n#HETSCHED --env B=2\necho hi\n#HETSCHED --gpus 1\n",
        )
        .expect("parsed");
        assert_eq!(d.job.tasks, Some(4));
        assert_eq!(d.job.cores, Some(2));
        assert_eq!(d.name.as_deref(), Some("my sweep"));
        assert_eq!(d.job.env, ["A=1", "B=2"]);
        assert_eq!(d.job.gpus, None, "after the first command: not a directive");
        // Windows line ends and a byte-order mark change nothing.
        let d = parse(
            "job.sh",
            "\u{feff}#!/bin/sh\r\n#HETSCHED --tasks 3\r\nrun\r\n",
        )
        .expect("parsed");
        assert_eq!(d.job.tasks, Some(3));
    }

    #[test]
    fn a_mistake_names_the_file_and_its_line() {
        let e = parse(
            "job.sh",
            "#!/bin/sh\n#HETSCHED --tasks 2\n#HETSCHED --coress 4\n",
        )
        .expect_err("refused");
        assert!(
            e.to_string()
                .starts_with("job.sh:3: #HETSCHED: unexpected argument '--coress'"),
            "{e}"
        );
        let e = parse("job.sh", "#HETSCHED --name 'open\n").expect_err("refused");
        assert_eq!(e.to_string(), "job.sh:1: #HETSCHED: unbalanced quotes");
        let e =
            parse("job.sh", "#HETSCHED --tasks 2\n#HETSCHED --array 1-3\n").expect_err("refused");
        assert!(
            e.to_string().starts_with("job.sh: #HETSCHED lines: "),
            "{e}"
        );
    }

    #[test]
    fn the_command_line_wins_and_lists_take_both() {
        let d = parse(
            "job.sh",
            "#HETSCHED --array 1-10 --cores 2 --env A=1 --name script --hold --priority 3\n\
             #HETSCHED --begin 2030-01-01T00:00:00Z --dependency afternotok:4,aftercorr:2\n",
        )
        .expect("parsed");
        let (mut name, mut after, mut after_any, mut hold) = (None, Vec::new(), Vec::new(), false);
        let (mut after_notok, mut after_corr) = (Vec::new(), vec![JobRef::Id(1)]);
        let mut begin = None;
        let mut job = CommandJobArgs {
            tasks: Some(3),
            cores: Some(4),
            env: vec!["B=2".into()],
            ..Default::default()
        };
        let mut named = Named {
            after: &mut after,
            after_any: &mut after_any,
            after_notok: &mut after_notok,
            after_corr: &mut after_corr,
            singleton: &mut false,
            after_start: &mut Vec::new(),
        };
        d.fill(&mut name, &mut named, &mut hold, &mut begin, &mut job)
            .expect("merged");
        assert_eq!(after_notok, [JobRef::Id(4)], "from --dependency");
        assert_eq!(
            after_corr,
            [JobRef::Id(2), JobRef::Id(1)],
            "both, the script's first"
        );
        assert_eq!(begin, Some(1_893_456_000_000));
        assert_eq!((job.tasks, job.array.as_deref()), (Some(3), None));
        assert_eq!(job.cores, Some(4));
        assert_eq!(job.env, ["A=1", "B=2"]);
        assert_eq!(job.priority, Some(3));
        assert_eq!((name.as_deref(), hold), (Some("script"), true));
    }

    #[test]
    fn auto_reads_only_scripts_and_never_a_shell_line() {
        let dir = ScratchDir::new("directives", "script");
        let script = dir.join("job.sh");
        std::fs::write(&script, "#HETSCHED --tasks 7\ntrue\n").expect("script");
        let program = script.to_string_lossy().to_string();
        let tasks = |mode, shell| {
            of_command(mode, std::slice::from_ref(&program), shell)
                .expect("read")
                .job
                .tasks
        };
        assert_eq!(tasks(Mode::Auto, false), Some(7));
        assert_eq!(tasks(Mode::Off, false), None);
        assert_eq!(tasks(Mode::Auto, true), None);
        let plain = dir.join("job");
        std::fs::write(&plain, "#HETSCHED --tasks 5\n").expect("script");
        let plain = vec![plain.to_string_lossy().to_string()];
        assert_eq!(
            of_command(Mode::Auto, &plain, false)
                .expect("read")
                .job
                .tasks,
            None
        );
        assert_eq!(
            of_command(Mode::File, &plain, false)
                .expect("read")
                .job
                .tasks,
            Some(5)
        );
        let e =
            of_command(Mode::File, &["/no/such/script".to_string()], false).expect_err("refused");
        assert!(
            e.to_string().starts_with("/no/such/script: cannot read"),
            "{e}"
        );
    }
}
