//! `hetsched submit [OPTIONS] -- COMMAND…`: a job of one application written on the command line
//! instead of in a job file — the quick path people know from `hq submit -- …` and
//! `sbatch --wrap`. The flags become the job file text the server parses for `hetsched submit
//! FILE` (one parser, one set of limits, one stored form); the text is checked here first with
//! the same parser, so a mistake names the flag (`--memory: …`), not a line of generated text.

use anyhow::{anyhow, bail};
use clap::Args;
use hetsched_core::input::InputError;
use hetsched_core::input::limits;
use hetsched_core::input::workload::{MAX_JOB_NAME, parse_workload};
use toml::{Table, Value};

/// What the submitted text is called in the server's messages and in `hetsched job`.
pub const ORIGIN: &str = "<command line>";

/// Flags of a command-line job. Each is the job file field of the same name (`--time-limit` is
/// `time_limit`); all are refused with a job file, which sets them itself.
#[derive(Debug, Default, Args)]
#[command(
    next_help_heading = "A job from the command line (`hetsched submit [OPTIONS] -- COMMAND…`)"
)]
pub struct CommandJobArgs {
    /// Tasks in the job (default 1). `{index}` in the command becomes each task's index,
    /// 0 to N−1 (also in `$HETSCHED_TASK_INDEX`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tasks: Option<u32>,
    /// One task per line of FILE (`-`: standard input), instead of `--tasks`: `{entry}` in the
    /// command becomes the task's line (also in `$HETSCHED_ENTRY`), `{index}` its number from 0.
    #[arg(long, value_name = "FILE", conflicts_with = "tasks")]
    pub each_line: Option<std::path::PathBuf>,
    /// One task per index of a list, instead of `--tasks` (HyperQueue's `--array`, Slurm's
    /// `--array`): `1-100`, `0-99:10,500`; `{index}` and `$HETSCHED_TASK_INDEX` are the task's
    /// index. A Slurm throttle `%N` at the end is `--max-running N`.
    #[arg(long, value_name = "INDICES", conflicts_with = "tasks")]
    pub array: Option<String>,
    /// Cores one task holds (default 1).
    #[arg(long, value_name = "N")]
    pub cores: Option<u32>,
    /// Memory one task holds (`512MiB`, `4GiB`; default none); its agent stops a task whose
    /// processes hold more.
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// GPUs one task holds; with it the tasks run only on nodes with GPUs, and
    /// `CUDA_VISIBLE_DEVICES` names the devices assigned.
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// Accelerator kind the GPUs must be (with `--gpus`; default any).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<String>,
    /// Whole nodes each task holds (HyperQueue's and Slurm's `--nodes`): with 2 or more, a task
    /// holds every core, all memory and every GPU of N nodes and runs on the first of them, with
    /// `HETSCHED_NODE_FILE` naming their hosts one per line (`--shell -- 'mpirun --hostfile
    /// "$HETSCHED_NODE_FILE" -np "$HETSCHED_TOTAL_CORES" …'`), `HETSCHED_NODES`, `HETSCHED_NUM_NODES`
    /// and `HETSCHED_NODE_CORES`; not with `--cores`, `--memory`, `--gpus` or `--pin`.
    #[arg(long, value_name = "N")]
    pub nodes: Option<u32>,
    /// Node attributes every task needs (its agent configuration's `attributes`; `gpu`: a node
    /// with GPUs): the tasks run only on nodes that have them all (repeat the flag or separate
    /// with commas; Slurm's `--constraint`).
    #[arg(long, value_name = "ATTR", value_delimiter = ',')]
    pub requires: Vec<String>,
    /// Nodes the tasks must not run on (Slurm's `--exclude`): names separated by commas or in
    /// brackets, `gpu[01-04]`; each becomes the requirement `!node:NAME`. (`--requires
    /// node:NAME` runs them on that node only; `--requires '!ATTR'` keeps them off nodes with an
    /// attribute.)
    #[arg(long, value_name = "NODES", value_parser = super::hostlist::expand)]
    pub exclude: Vec<Vec<String>>,
    /// Wall-clock limit of one task (`90s`, `2m`, or as Slurm and HyperQueue write it,
    /// `01:30:00`, `1-00:00:00`): it is killed and the attempt fails.
    #[arg(long, value_name = "DURATION")]
    pub time_limit: Option<String>,
    /// A stopped task's time between SIGTERM and SIGKILL, to save its state (`2m`; default:
    /// its agent's `kill_grace`; at most 1h).
    #[arg(long, value_name = "DURATION")]
    pub kill_grace: Option<String>,
    /// A signal each task's processes get before its time limit, to save their state
    /// (Slurm's `--signal`): `USR1@2m` (the signal, then how long before; `USR1` alone: 60 s
    /// before). One of HUP, INT, QUIT, USR1, USR2, ALRM, TERM, CONT, URG, WINCH.
    #[arg(long, value_name = "SIG[@DURATION]")]
    pub signal: Option<String>,
    /// Times a failed task runs again (default 0, at most 100).
    #[arg(long, value_name = "N")]
    pub retries: Option<u32>,
    /// The most of the job's tasks that run at once, wherever they run (default: no limit;
    /// Slurm's `--array=…%N`).
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// Priority among the server's applications: higher levels are served first (default 0).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// An environment variable for every task (repeat for more).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Directory the tasks run in on the nodes (absolute, or relative to here; default: this
    /// directory if it exists on the node, else the agent's work directory).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// Where each task's stdout goes instead of its agent's capture file (Slurm's `--output`,
    /// HyperQueue's `--stdout`): a path with `{job}`, `{app}`, `{index}`, `{task}` and
    /// `{attempt}` filled in per task, relative to the task's directory (missing directories
    /// are created; `hetsched log` still reads it), or `none` to discard it.
    #[arg(long, value_name = "PATH")]
    pub stdout: Option<String>,
    /// Where each task's stderr goes, as `--stdout`; the same path as `--stdout` puts both
    /// streams in one file (Slurm's default).
    #[arg(long, value_name = "PATH")]
    pub stderr: Option<String>,
    /// Bind each task's processes to CPUs of its own, as many as its `--cores` (HyperQueue's
    /// `--pin`): the task gets `HETSCHED_CPUS` (the list) and `OMP_NUM_THREADS`.
    #[arg(long)]
    pub pin: bool,
    /// The application's name (default: the program's file name); task outputs and
    /// `hetsched log JOB APP:INDEX` use it (`log` also takes the job's `--name` there).
    #[arg(long, value_name = "NAME")]
    pub app: Option<String>,
    /// Run the command, one argument, as a shell line (`sh -c`) instead of as a program with
    /// its arguments.
    #[arg(long)]
    pub shell: bool,
}

impl CommandJobArgs {
    /// The first flag given, as typed: refused with a job file.
    pub fn first_given(&self) -> Option<&'static str> {
        let given = [
            (self.tasks.is_some(), "--tasks"),
            (self.each_line.is_some(), "--each-line"),
            (self.array.is_some(), "--array"),
            (self.cores.is_some(), "--cores"),
            (self.memory.is_some(), "--memory"),
            (self.gpus.is_some(), "--gpus"),
            (self.kind.is_some(), "--kind"),
            (self.nodes.is_some(), "--nodes"),
            (!self.requires.is_empty(), "--requires"),
            (!self.exclude.is_empty(), "--exclude"),
            (self.time_limit.is_some(), "--time-limit"),
            (self.kill_grace.is_some(), "--kill-grace"),
            (self.signal.is_some(), "--signal"),
            (self.retries.is_some(), "--retries"),
            (self.max_running.is_some(), "--max-running"),
            (self.priority.is_some(), "--priority"),
            (!self.env.is_empty(), "--env"),
            (self.workdir.is_some(), "--workdir"),
            (self.stdout.is_some(), "--stdout"),
            (self.stderr.is_some(), "--stderr"),
            (self.pin, "--pin"),
            (self.app.is_some(), "--app"),
            (self.shell, "--shell"),
        ];
        given.into_iter().find(|(g, _)| *g).map(|(_, f)| f)
    }
}

/// A job written on the command line, as the job file text the server stores.
#[derive(Debug)]
pub struct CommandJob {
    /// The job file text (TOML).
    pub text: String,
    /// How many of its application's `requires` came from `--requires` (the first ones) and
    /// from `--exclude` (the rest), to name the flag in the server's refusals.
    pub requires: (usize, usize),
}

/// Builds and checks the job of `command` (the words after `--`); `name` is the job's name
/// (default: the program's file name).
pub fn build(
    args: &CommandJobArgs,
    command: &[String],
    name: Option<&str>,
) -> anyhow::Result<CommandJob> {
    let Some(program) = command.first() else {
        bail!("no command after `--`");
    };
    if args.shell && command.len() != 1 {
        bail!(
            "--shell runs one shell line; quote it as one argument (got {} arguments after `--`)",
            command.len()
        );
    }
    // `-- 'sleep 3; echo done'` names a program called `sleep 3; echo done`, which no agent
    // can start (and whose words would name the job for every user to read).
    if !args.shell
        && program.chars().any(char::is_whitespace)
        && !std::path::Path::new(program).exists()
    {
        bail!(
            "the program `{program}` holds spaces: give its words apart (`-- sleep 3`), or run \
             the line through a shell with --shell (`--shell -- 'sleep 3; echo done'`)"
        );
    }
    if !args.shell {
        refuse_unexecutable(program, args.workdir.is_some())?;
    }
    if args.kind.is_some() && args.gpus.is_none_or(|g| g == 0) {
        bail!("--kind names the kind of GPU a task needs: give --gpus too");
    }
    let mut variant = Table::new();
    variant.insert(
        "command".into(),
        if args.shell {
            Value::String(program.clone())
        } else {
            Value::Array(command.iter().cloned().map(Value::String).collect())
        },
    );
    let gpu = args.gpus.is_some_and(|g| g > 0);
    if let Some(g) = args.gpus.filter(|&g| g > 0) {
        variant.insert("gpus".into(), Value::Integer(g.into()));
    }
    if let Some(k) = &args.kind {
        variant.insert("kind".into(), Value::String(k.clone()));
    }
    if let Some(c) = args.cores {
        variant.insert("cores".into(), Value::Integer(c.into()));
    }
    if let Some(m) = &args.memory {
        variant.insert("memory".into(), Value::String(m.clone()));
    }
    if let Some(g) = &args.kill_grace {
        variant.insert("kill_grace".into(), Value::String(g.clone()));
    }
    if let Some(s) = &args.signal {
        variant.insert("signal".into(), Value::String(s.clone()));
    }
    if let Some(t) = &args.time_limit {
        variant.insert("time_limit".into(), Value::String(t.clone()));
    }
    if !args.env.is_empty() {
        let mut env = Table::new();
        for kv in &args.env {
            let Some((k, v)) = kv.split_once('=') else {
                bail!("--env {kv}: expected KEY=VALUE");
            };
            if k.is_empty() {
                bail!("--env {kv}: the variable's name is empty");
            }
            if env.insert(k.into(), Value::String(v.into())).is_some() {
                bail!("--env {k}: given twice");
            }
        }
        variant.insert("env".into(), Value::Table(env));
    }
    let mut app = Table::new();
    app.insert(
        "name".into(),
        Value::String(
            args.app
                .clone()
                .unwrap_or_else(|| app_name(program, args.shell)),
        ),
    );
    match &args.each_line {
        Some(file) => {
            let lines = read_lines(file)?;
            app.insert(
                "entries".into(),
                Value::Array(lines.into_iter().map(Value::String).collect()),
            );
        }
        // With `--array`, one task per index.
        None if args.array.is_some() => {}
        None => {
            app.insert(
                "tasks".into(),
                Value::Integer(args.tasks.unwrap_or(1).into()),
            );
        }
    }
    if let Some(r) = args.retries {
        app.insert("retries".into(), Value::Integer(r.into()));
    }
    let mut max_running = args.max_running;
    if let Some(spec) = &args.array {
        let (indices, throttle) = match spec.split_once('%') {
            Some((i, n)) => {
                let n: u32 = n.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    anyhow!(
                        "--array {spec}: `%{n}` must be a number of tasks, at least 1 (Slurm's \
                         throttle)"
                    )
                })?;
                if max_running.is_some() {
                    bail!("--array {spec}: give the throttle either as `%{n}` or as --max-running");
                }
                (i, Some(n))
            }
            None => (spec.as_str(), None),
        };
        max_running = max_running.or(throttle);
        app.insert("indices".into(), Value::String(indices.to_string()));
    }
    if let Some(m) = max_running {
        app.insert("max_running".into(), Value::Integer(m.into()));
    }
    if let Some(n) = args.nodes {
        app.insert("nodes".into(), Value::Integer(n.into()));
    }
    let excluded = args.exclude.iter().flatten().map(|n| {
        format!(
            "{}{}{n}",
            hetsched_core::model::cluster::NOT_PREFIX,
            hetsched_core::model::cluster::NODE_NAME_PREFIX
        )
    });
    let requires: Vec<Value> = args
        .requires
        .iter()
        .cloned()
        .chain(excluded)
        .map(Value::String)
        .collect();
    if !requires.is_empty() {
        app.insert("requires".into(), Value::Array(requires));
    }
    if let Some(p) = args.priority {
        app.insert("priority".into(), Value::Integer(p.into()));
    }
    if let Some(w) = &args.workdir {
        app.insert("workdir".into(), Value::String(w.clone()));
    }
    if args.pin {
        app.insert("pin".into(), Value::Boolean(true));
    }
    for (field, value) in [("stdout", &args.stdout), ("stderr", &args.stderr)] {
        if let Some(v) = value {
            app.insert(field.into(), Value::String(v.clone()));
        }
    }
    app.insert(
        if gpu { "gpu" } else { "cpu" }.into(),
        Value::Table(variant),
    );
    let mut job = Table::new();
    job.insert(
        "name".into(),
        Value::String(name.map_or_else(|| job_name(program, args.shell), str::to_string)),
    );
    job.insert("application".into(), Value::Array(vec![Value::Table(app)]));
    let text = toml::to_string(&job)?;
    if let Some(file) = &args.each_line
        && text.len() > limits::MAX_JOB_FILE_BYTES
    {
        bail!(
            "--each-line {}: its lines make a job of {} bytes, over the {} bytes a job may have \
             (2 MiB); split the file over several jobs, or give `--tasks N` and let each task read \
             its line ({{index}} is its number from 0)",
            file.display(),
            text.len(),
            limits::MAX_JOB_FILE_BYTES
        );
    }
    // The server checks the same again, and against its nodes; checking here first lets the
    // error name the flag.
    let w = parse_workload(ORIGIN, &text).map_err(flag_error)?;
    w.check_commands().map_err(flag_error)?;
    limits::check(&w).map_err(flag_error)?;
    Ok(CommandJob {
        text,
        requires: (args.requires.len(), args.exclude.iter().flatten().count()),
    })
}

/// Refuses a program given as a path (`./job.sh`, `/shared/run.sh`) that is a file here without
/// an execute bit: every task would fail to start with `Permission denied` on a node that sees
/// the same file (the usual shared file system), and `sbatch` users write scripts without one,
/// since `sbatch` runs them through their shell. A bare name is looked up in the nodes' `PATH`,
/// and a relative path with `--workdir` names a file there, so neither is checked.
fn refuse_unexecutable(program: &str, workdir: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::path::Path::new(program);
    if !program.contains('/') || (workdir && path.is_relative()) {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 == 0 => bail!(
            "`{program}` is not executable: `chmod +x {program}`, or run it with its shell \
             (`-- sh {program}`)"
        ),
        _ => Ok(()),
    }
}

/// The lines of `--each-line FILE` (`-`: standard input), one task each; a last line without its
/// newline counts, a final newline adds no empty task.
fn read_lines(file: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| anyhow!("--each-line -: reading standard input: {e}"))?;
        text
    } else {
        std::fs::read_to_string(file).map_err(|e| anyhow!("--each-line {}: {e}", file.display()))?
    };
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.is_empty() {
        bail!("--each-line {}: no lines, so no tasks", file.display());
    }
    Ok(lines)
}

/// The flag (or the command) behind a field of the generated job file.
fn flag(field: &str) -> String {
    let rest = field
        .strip_prefix("application[0]")
        .map(|r| r.trim_start_matches('.'));
    let Some(rest) = rest else {
        return match field {
            "name" => "--name".into(),
            other => other.into(),
        };
    };
    let rest = rest
        .strip_prefix("cpu")
        .or_else(|| rest.strip_prefix("gpu"))
        .map_or(rest, |r| r.trim_start_matches('.'));
    // `entries[k]` is line k + 1 of the `--each-line` file.
    if let Some(k) = rest
        .strip_prefix("entries[")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|k| k.parse::<usize>().ok())
    {
        return format!("--each-line line {}", k + 1);
    }
    match rest.split(['.', '[']).next().unwrap_or("") {
        "command" => "the command".into(),
        "name" => "--app".into(),
        "time_limit" => "--time-limit".into(),
        "kill_grace" => "--kill-grace".into(),
        "entries" => "--each-line".into(),
        "indices" => "--array".into(),
        // The variant as a whole: what one task holds.
        "" => "the task's resources (--cores, --memory, --gpus)".into(),
        f => format!("--{}", f.replace('_', "-")),
    }
}

/// The flag a requirement of the field `application[0].requires[J]` came from: the first
/// `requires.0` from `--requires`, the rest from `--exclude` (`!node:NAME` each); the field as a
/// whole (a combination no node meets) names the flags that gave any.
fn requires_flag(field: &str, (given, excluded): (usize, usize)) -> &'static str {
    let index = field
        .strip_prefix("application[0].requires[")
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|j| j.parse::<usize>().ok());
    match index {
        Some(j) if j < given => "--requires",
        Some(_) => "--exclude",
        None if excluded == 0 => "--requires",
        None if given == 0 => "--exclude",
        None => "--requires/--exclude",
    }
}

/// A parse or limit error of the generated text, told in terms of the flags.
fn flag_error(e: InputError) -> anyhow::Error {
    match &e.field {
        Some(f) => anyhow!("{}: {}", flag(f), e.message),
        None => anyhow!("{}", e.message),
    }
}

/// The server's message about a command-line job, told in terms of the flags: its messages name
/// `<command line>:LINE:COLUMN: FIELD:` of the generated text, which the user never saw.
/// `requires`: how many requirements came from `--requires` and from `--exclude`
/// ([`CommandJob::requires`]), to name the flag a requirement came from.
pub fn relocate(message: &str, requires: (usize, usize)) -> String {
    let Some(rest) = message.strip_prefix(ORIGIN) else {
        return message.to_string();
    };
    // Skip `:LINE` and `:COLUMN` when there, then `: `.
    let mut rest = rest;
    for _ in 0..2 {
        if let Some(after) = rest.strip_prefix(':')
            && after.starts_with(|c: char| c.is_ascii_digit())
        {
            rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
        }
    }
    let rest = rest.strip_prefix(": ").unwrap_or(rest);
    match rest.split_once(": ") {
        Some((field, what)) if field.starts_with("application[0].requires") => {
            format!("{}: {what}", requires_flag(field, requires))
        }
        Some((field, what)) if field.starts_with("application[") || field == "name" => {
            format!("{}: {what}", flag(field))
        }
        _ => rest.to_string(),
    }
}

/// The default application name: the program's file name (a shell line's program's,
/// [`shell_program`]), made
/// a valid application name (no `/`, no leading `.`, no control characters or invisible
/// formatting characters, at most 128 bytes).
fn app_name(program: &str, shell: bool) -> String {
    let from_line;
    let word = if shell {
        from_line = shell_program(program).unwrap_or_default();
        from_line.as_str()
    } else {
        program
    };
    let base = word.rsplit('/').next().unwrap_or(word);
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_control() || hetsched_core::text::hidden(c) || c == '\\' {
                '_'
            } else {
                c
            }
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string();
    truncate(&mut name, limits::MAX_APP_NAME);
    if name.trim().is_empty() {
        "command".into()
    } else {
        name
    }
}

/// The program a shell line runs, as a name for it: the first word of its simple commands
/// (split at `;`, `&`, `|`, newlines and brackets outside quotes) that is not a variable
/// assignment (`i=0`), a shell keyword (`while`, `do`, …) or a command that only prepares the
/// environment (`cd`, `export`, `module`, …), its quotes removed. `cd /data && ./run` → `./run`;
/// `i=0; while …; do echo $i; done` → `echo`; `export PASS="x;y"; ./run` → `./run` (a separator
/// inside quotes separates nothing: every user lists every job's name, so no part of an
/// argument may become one). None when every command is such (the caller's fallback).
fn shell_program(line: &str) -> Option<String> {
    // Words that start a command but name no program of the user's.
    const KEYWORDS: &[&str] = &[
        "!", "{", "}", "do", "done", "then", "else", "elif", "fi", "esac", "time", "exec", "nohup",
        "command", "builtin", "env",
    ];
    // Commands that only prepare what follows: a line's program is after them.
    const PREPARING: &[&str] = &[
        "cd", "pushd", "popd", "export", "unset", "set", "source", ".", "umask", "ulimit",
        "module", "ml", "while", "until", "for", "if", "case", "[", "[[", "test", "trap", "shift",
        "local", "declare",
    ];
    let assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        })
    };
    // Tests that only guard what follows (`[ -d x ] && ./run`); a line of nothing else is a
    // test, and named so.
    const TESTS: &[&str] = &["[", "[[", "test"];
    let commands = shell_commands(line);
    let firsts: Vec<&ShellWord> = commands
        .iter()
        .filter_map(|words| {
            words
                .iter()
                .find(|w| !assignment(&w.raw) && !KEYWORDS.contains(&w.raw.as_str()))
        })
        .collect();
    firsts
        .iter()
        .find(|w| !PREPARING.contains(&w.raw.as_str()))
        .map(|w| w.unquoted.clone())
        .or_else(|| {
            firsts
                .iter()
                .any(|w| TESTS.contains(&w.raw.as_str()))
                .then(|| "test".to_string())
        })
}

/// A word of a shell line: as written (`A="x y"`), and with its quotes and escapes removed.
struct ShellWord {
    raw: String,
    unquoted: String,
}

/// A shell line's simple commands, each as its words: split at `;`, `&`, `|`, newlines and
/// brackets, and into words at blanks, only outside single quotes, double quotes, backslash
/// escapes and expansions — `$(…)`, `$((…))`, `${…}` and backquotes are part of the word they are
/// in (what POSIX `sh` does before it expands anything; expansions stay as written, so
/// `x=$((1+2))` is one assignment, not `1+2`). An unclosed quote or expansion runs to the end of
/// the line.
fn shell_commands(line: &str) -> Vec<Vec<ShellWord>> {
    let mut commands = Vec::new();
    let mut words: Vec<ShellWord> = Vec::new();
    let mut word: Option<ShellWord> = None;
    let mut chars = line.chars();
    let push = |word: &mut Option<ShellWord>, c: char, literal: Option<char>| {
        let w = word.get_or_insert_with(|| ShellWord {
            raw: String::new(),
            unquoted: String::new(),
        });
        w.raw.push(c);
        if let Some(l) = literal {
            w.unquoted.push(l);
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                push(&mut word, c, None);
                if let Some(next) = chars.next() {
                    push(&mut word, next, Some(next));
                }
            }
            '\'' => {
                push(&mut word, c, None);
                for q in chars.by_ref() {
                    if q == '\'' {
                        push(&mut word, q, None);
                        break;
                    }
                    push(&mut word, q, Some(q));
                }
            }
            '"' => {
                push(&mut word, c, None);
                while let Some(q) = chars.next() {
                    match q {
                        '"' => {
                            push(&mut word, q, None);
                            break;
                        }
                        '\\' => {
                            push(&mut word, q, None);
                            if let Some(next) = chars.next() {
                                push(&mut word, next, Some(next));
                            }
                        }
                        _ => push(&mut word, q, Some(q)),
                    }
                }
            }
            '$' if matches!(chars.clone().next(), Some('(' | '{')) => {
                push(&mut word, c, Some(c));
                expansion(&mut chars, &mut |c| push(&mut word, c, Some(c)));
            }
            '`' => {
                push(&mut word, c, Some(c));
                while let Some(q) = chars.next() {
                    push(&mut word, q, Some(q));
                    match q {
                        '`' => break,
                        '\\' => {
                            if let Some(next) = chars.next() {
                                push(&mut word, next, Some(next));
                            }
                        }
                        _ => {}
                    }
                }
            }
            ';' | '&' | '|' | '\n' | '(' | ')' => {
                words.extend(word.take());
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            c if c.is_whitespace() => words.extend(word.take()),
            c => push(&mut word, c, Some(c)),
        }
    }
    words.extend(word.take());
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

/// Copies an expansion that opens at the next character (`(` of `$(…)` or `$((…))`, `{` of
/// `${…}`) to `out`, up to its matching close: brackets nest, and quotes inside it hold their
/// brackets (`$(echo ")")`).
fn expansion(chars: &mut std::str::Chars<'_>, out: &mut impl FnMut(char)) {
    let mut open: Vec<char> = Vec::new();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        out(c);
        match (quote, c) {
            (Some(_), '\\') => {
                if let Some(next) = chars.next() {
                    out(next);
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') => {
                if let Some(next) = chars.next() {
                    out(next);
                }
            }
            (None, '(') => open.push(')'),
            (None, '{') => open.push('}'),
            (None, ')' | '}') => {
                if open.last() == Some(&c) {
                    open.pop();
                }
                if open.is_empty() {
                    return;
                }
            }
            _ => {}
        }
    }
}

/// The default job name: the program's file name (a shell line's program's), as the
/// default application name. Not the command line: every user lists every job's name, and a
/// command's arguments may hold what only its owner should read (`--password=…`).
fn job_name(program: &str, shell: bool) -> String {
    let mut name = app_name(program, shell);
    truncate(&mut name, MAX_JOB_NAME);
    name
}

/// Cuts `s` to at most `max` bytes at a character boundary.
fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hetsched_core::testkit::ScratchDir;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| (*w).to_string()).collect()
    }

    #[test]
    fn a_plain_command_is_one_cpu_task_named_after_its_program() {
        let job = build(
            &CommandJobArgs::default(),
            &words(&["/usr/bin/solve", "--n", "{index}"]),
            None,
        )
        .expect("valid");
        let w = parse_workload(ORIGIN, &job.text).expect("parses");
        assert_eq!(
            w.name.as_deref(),
            Some("solve"),
            "no argument in the listed name"
        );
        let a = &w.applications[0];
        assert_eq!(a.name.get_ref(), "solve");
        assert_eq!(a.task_count(), 1);
        let cpu = a.cpu.as_ref().expect("cpu variant").get_ref();
        assert_eq!(
            cpu.command,
            Some(hetsched_core::input::workload::Command::Argv(words(&[
                "/usr/bin/solve",
                "--n",
                "{index}"
            ])))
        );
        assert!(a.gpu.is_none());
    }

    #[test]
    fn a_quoted_command_line_without_shell_is_refused_and_says_how() {
        let e = build(
            &CommandJobArgs::default(),
            &words(&["sleep 3; echo done {index}"]),
            None,
        )
        .expect_err("no such program")
        .to_string();
        assert!(
            e.starts_with("the program `sleep 3; echo done {index}` holds spaces")
                && e.contains("--shell"),
            "{e}"
        );
        let shell = CommandJobArgs {
            shell: true,
            ..CommandJobArgs::default()
        };
        let job =
            build(&shell, &words(&["sleep 3; echo done {index}"]), None).expect("a shell line");
        let w = parse_workload(ORIGIN, &job.text).expect("parses");
        assert_eq!(w.name.as_deref(), Some("sleep"));
    }

    /// `--array 1-4 --stdout same.out` (Slurm's `--output` without `%a`) would have the four
    /// tasks truncate one file, and `log` show the last one's output for each: refused, naming
    /// the flag and the placeholder to add; with `{index}`, or for one task, accepted.
    #[test]
    fn an_output_file_shared_by_every_task_is_refused_naming_the_flag() {
        let args = |stdout: &str, array: &str| CommandJobArgs {
            array: Some(array.into()),
            stdout: Some(stdout.into()),
            ..CommandJobArgs::default()
        };
        let e = build(&args("same.out", "1-4"), &words(&["true"]), None)
            .expect_err("one file for four tasks")
            .to_string();
        assert!(
            e.starts_with("--stdout: `same.out` names one file for all 4 tasks")
                && e.contains("`same-{index}.out`"),
            "{e}"
        );
        build(&args("out/{index}.out", "1-4"), &words(&["true"]), None).expect("one per task");
        build(&args("same.out", "7"), &words(&["true"]), None).expect("one task");
    }

    #[test]
    fn an_each_line_entry_over_the_bound_is_refused_at_its_line() {
        let dir = ScratchDir::new("command-job", "each-line");
        let file = dir.join("inputs.txt");
        let long = "x".repeat(hetsched_core::input::workload::MAX_ENTRY_BYTES + 1);
        std::fs::write(&file, format!("a.dat\nb.dat\n{long}\nd.dat\n")).expect("write");
        let args = CommandJobArgs {
            each_line: Some(file),
            ..CommandJobArgs::default()
        };
        let e = build(&args, &words(&["gzip", "{entry}"]), None)
            .expect_err("refused")
            .to_string();
        assert!(
            e.starts_with("--each-line line 3: an entry is at most 16384 bytes"),
            "{e}"
        );
    }

    #[test]
    fn array_gives_the_indices_and_slurms_throttle() {
        let job = |array: &str, max_running: Option<u32>| {
            let args = CommandJobArgs {
                array: Some(array.into()),
                max_running,
                ..CommandJobArgs::default()
            };
            build(&args, &words(&["echo", "{index}"]), None)
        };
        let w =
            parse_workload(ORIGIN, &job("1-5:2,10%2", None).expect("valid").text).expect("parses");
        let a = &w.applications[0];
        assert_eq!(a.indices(), Some(vec![1, 3, 5, 10]));
        assert_eq!(a.task_count(), 4);
        assert_eq!(a.max_running.as_ref().map(|m| *m.get_ref()), Some(2));
        let err = |array: &str, max_running: Option<u32>| {
            job(array, max_running).expect_err("refused").to_string()
        };
        assert_eq!(
            err("1-9%x", None),
            "--array 1-9%x: `%x` must be a number of tasks, at least 1 (Slurm's throttle)"
        );
        assert_eq!(
            err("1-9%0", None),
            "--array 1-9%0: `%0` must be a number of tasks, at least 1 (Slurm's throttle)"
        );
        assert_eq!(
            err("1-9%2", Some(3)),
            "--array 1-9%2: give the throttle either as `%2` or as --max-running"
        );
        assert_eq!(
            err("5-1", None),
            "--array: `5-1`: the range ends before it starts"
        );
    }

    #[test]
    fn nodes_makes_multi_node_tasks_and_what_cannot_go_with_it_names_its_flag() {
        let job = |nodes: u32, cores: Option<u32>, pin: bool| {
            let args = CommandJobArgs {
                nodes: Some(nodes),
                cores,
                pin,
                ..CommandJobArgs::default()
            };
            build(&args, &words(&["mpirun", "./solve"]), None)
        };
        let w = parse_workload(ORIGIN, &job(4, None, false).expect("valid").text).expect("parses");
        let apps = w
            .to_applications(
                0,
                hetsched_core::input::workload::MissingProfile::Estimate(1),
            )
            .expect("applications");
        assert_eq!(apps[0].nodes, 4);
        let err = |nodes, cores, pin| job(nodes, cores, pin).expect_err("refused").to_string();
        assert!(
            err(4, Some(2), false).starts_with("--cores: a multi-node task holds every core"),
            "{}",
            err(4, Some(2), false)
        );
        assert!(
            err(2, None, true).starts_with("--pin: "),
            "{}",
            err(2, None, true)
        );
        assert_eq!(err(0, None, false), "--nodes: must be 1 to 1024");
    }

    #[test]
    fn every_flag_lands_in_its_job_file_field() {
        let args = CommandJobArgs {
            tasks: Some(12),
            each_line: None,
            cores: Some(2),
            memory: Some("3GiB".into()),
            gpus: Some(1),
            kind: Some("a100".into()),
            requires: words(&["bigmem", "ssd"]),
            exclude: vec![words(&["n1", "n2"]), words(&["gpu07"])],
            time_limit: Some("90s".into()),
            kill_grace: Some("2m".into()),
            signal: Some("USR1@30s".into()),
            retries: Some(3),
            max_running: Some(4),
            array: None,
            priority: Some(-2),
            env: words(&["A=1", "B=x=y"]),
            workdir: Some("/scratch/run".into()),
            stdout: Some("logs/{app}-{index}.out".into()),
            stderr: Some("none".into()),
            pin: true,
            app: Some("train".into()),
            shell: true,
            nodes: None,
        };
        let job = build(
            &args,
            &words(&["python train.py --fold {index}"]),
            Some("folds"),
        )
        .expect("valid");
        let w = parse_workload(ORIGIN, &job.text).expect("parses");
        assert_eq!(w.name.as_deref(), Some("folds"));
        let a = &w.applications[0];
        assert_eq!(a.name.get_ref(), "train");
        assert_eq!(a.task_count(), 12);
        assert_eq!(*a.retries.get_ref(), 3);
        assert_eq!(a.max_running.as_ref().map(|m| *m.get_ref()), Some(4));
        assert_eq!(
            a.requires(),
            ["!node:gpu07", "!node:n1", "!node:n2", "bigmem", "ssd"]
        );
        assert_eq!(a.priority, -2);
        assert_eq!(
            a.workdir.as_ref().map(|w| w.get_ref().as_str()),
            Some("/scratch/run")
        );
        assert_eq!(
            a.stdout.as_ref().map(|s| s.get_ref().as_str()),
            Some("logs/{app}-{index}.out")
        );
        assert_eq!(
            a.stderr.as_ref().map(|s| s.get_ref().as_str()),
            Some("none")
        );
        assert!(a.pin);
        assert!(a.cpu.is_none(), "--gpus makes it a GPU task");
        let g = a.gpu.as_ref().expect("gpu variant").get_ref();
        assert_eq!(*g.gpus.get_ref(), 1);
        assert_eq!(*g.cores.get_ref(), 2);
        assert_eq!(g.memory.as_u64(), 3 << 30);
        assert_eq!(g.kind.as_deref(), Some("a100"));
        assert_eq!(g.time_limit.map(|d| d.0), Some(90_000_000_000));
        assert_eq!(g.kill_grace.map(|d| d.0), Some(120_000_000_000));
        assert_eq!(
            g.signal.map(|s| (s.signal, s.before)),
            Some(("USR1", 30_000_000_000))
        );
        assert_eq!(g.env.get("B").map(String::as_str), Some("x=y"));
        assert_eq!(
            g.command,
            Some(hetsched_core::input::workload::Command::Shell(
                "python train.py --fold {index}".into()
            ))
        );
    }

    #[test]
    fn mistakes_name_the_flag() {
        let err = |args: CommandJobArgs, cmd: &[&str]| {
            build(&args, &words(cmd), None)
                .expect_err("refused")
                .to_string()
        };
        let true_ = ["true"];
        let echo_hi = ["echo", "hi"];
        type Case<'a> = (fn(&mut CommandJobArgs), &'a [&'a str], &'a str);
        let cases: [Case; 12] = [
            (
                |a| a.signal = Some("KILL@1m".into()),
                &true_,
                "--signal: invalid signal `KILL` in `KILL@1m`",
            ),
            (
                |a| a.stdout = Some("out-%j.txt".into()),
                &true_,
                "--stdout: ",
            ),
            (|a| a.memory = Some("lots".into()), &true_, "--memory: "),
            (
                |a| a.kill_grace = Some("2h".into()),
                &true_,
                "--kill-grace: must be at most 1h",
            ),
            (
                |a| a.time_limit = Some("soon".into()),
                &true_,
                "--time-limit: ",
            ),
            (
                |a| a.time_limit = Some("0s".into()),
                &true_,
                "--time-limit: must be at least 1ms (leave it out for no limit)",
            ),
            (|a| a.retries = Some(1000), &true_, "--retries: "),
            (
                |a| a.max_running = Some(0),
                &true_,
                "--max-running: must be at least 1 (leave it out for no limit)",
            ),
            (|a| a.app = Some("../x".into()), &true_, "--app: "),
            (
                |a| a.env = words(&["NOVALUE"]),
                &true_,
                "--env NOVALUE: expected KEY=VALUE",
            ),
            (|a| a.shell = true, &echo_hi, "--shell runs one shell line"),
            (
                |a| a.kind = Some("a100".into()),
                &true_,
                "--kind names the kind of GPU a task needs: give --gpus too",
            ),
        ];
        for (set, cmd, says) in cases {
            let mut args = CommandJobArgs::default();
            set(&mut args);
            let e = err(args, cmd);
            assert!(e.starts_with(says), "{e}");
        }
        // The runtime's bound, not the simulator's.
        let e = err(
            CommandJobArgs {
                tasks: Some(100_000_000),
                ..CommandJobArgs::default()
            },
            &true_,
        );
        assert_eq!(
            e,
            "--tasks: 100000000 tasks bring the job to 100000000: at most 1000000 per job"
        );
        let long = "x".repeat(70_000);
        let e = err(CommandJobArgs::default(), &["echo", &long]);
        assert!(e.starts_with("the command: "), "{e}");
        assert!(e.contains("at most 65536"), "{e}");
        assert!(err(CommandJobArgs::default(), &[]).contains("no command after `--`"));
    }

    #[test]
    fn server_messages_about_the_generated_text_name_the_flag() {
        assert_eq!(
            relocate(
                "<command line>:7:1: application[0].gpu: application `x` runs only on GPUs, and no node has 2 GPUs",
                (0, 0)
            ),
            "the task's resources (--cores, --memory, --gpus): application `x` runs only on GPUs, and no node has 2 GPUs"
        );
        assert_eq!(
            relocate(
                "<command line>:3:9: application[0].cpu.cores: too many",
                (0, 0)
            ),
            "--cores: too many"
        );
        assert_eq!(relocate("job.toml:3:9: x: y", (0, 0)), "job.toml:3:9: x: y");
        // A requirement names the flag it came from: `--requires` first, `--exclude` after.
        let req = |field: &str, n| {
            relocate(
                &format!("<command line>:5:1: application[0].requires{field}: x"),
                n,
            )
        };
        assert_eq!(req("[0]", (1, 1)), "--requires: x");
        assert_eq!(req("[1]", (1, 1)), "--exclude: x");
        assert_eq!(req("", (0, 3)), "--exclude: x");
        assert_eq!(req("", (2, 0)), "--requires: x");
        assert_eq!(req("", (1, 1)), "--requires/--exclude: x");
    }

    #[test]
    fn default_names_are_valid_and_short() {
        assert_eq!(app_name("./.hidden-tool", false), "hidden-tool");
        assert_eq!(app_name("echo {index} > out", true), "echo");
        assert_eq!(app_name("/", false), "command");
        // The server refuses a name with a bidi control or a zero-width joiner: a program
        // named so still runs, under a name without them.
        assert_eq!(app_name("./tool\u{202e}hs.gpj", false), "tool_hs.gpj");
        assert_eq!(job_name("/opt/de\u{200d}ploy -x", true), "de_ploy");
        // A job is listed to every user: its default name holds no argument.
        assert_eq!(job_name("/opt/bin/deploy", false), "deploy");
        assert_eq!(job_name("curl -u admin:hunter2 https://x", true), "curl");
    }

    /// A shell line is named after the program it runs, not its first word: not a variable
    /// assignment (`i=0;`, which also named the output files), a keyword or a command that
    /// only prepares the environment (`cd`, `module`).
    #[test]
    fn a_shell_lines_default_name_is_its_program() {
        for (line, name) in [
            ("cd /data && ./run --x 1", "run"),
            (
                "i=0; while [ $i -lt 3 ]; do echo $i; i=$((i+1)); done",
                "echo",
            ),
            ("module load gcc; OMP_NUM_THREADS=4 srun ./sim", "srun"),
            ("export A=1\n/opt/bin/train --epochs 3", "train"),
            ("time nohup python3 x.py > log", "python3"),
            ("(cd sub; make -j4)", "make"),
            ("sleep 3; echo done", "sleep"),
            ("echo {index} > out", "echo"),
            ("cd /data", "command"),
            ("X=1", "command"),
            // A separator inside quotes or escaped separates nothing: no part of an argument
            // or a value becomes the name every user lists.
            ("export DBPASS=\"x;hunter2\"; ./run", "run"),
            ("cd \"/tmp/a; b\" && ./run", "run"),
            ("trap \"echo hi; exit 0\" USR1; sleep 1", "sleep"),
            ("export K='a|b&c'\n./run", "run"),
            ("A=\"x y\" B=z ./run 'p;q'", "run"),
            ("export P=a\\;secret; ./run", "run"),
            ("\"/opt/my tools/solve\" --n 3", "solve"),
            ("export P=\"unclosed; ./run", "command"),
            // An expansion is part of its word: its brackets and operators split nothing.
            ("x=$((1+2)); echo $x", "echo"),
            ("d=$(dirname \"$0\"); \"$d\"/solve", "solve"),
            ("v=${A:-(none)}; ./run", "run"),
            ("n=`nproc`; ./run -j $n", "run"),
            ("x=$(echo \")\"; ls); ./run", "run"),
            // A line that only tests is named so, not after a word of an operand.
            ("test -d /tmp || [ $(({index} % 2)) -eq 0 ]", "test"),
            ("[ -f done ] && ./run", "run"),
        ] {
            assert_eq!(app_name(line, true), name, "{line}");
        }
    }
}
