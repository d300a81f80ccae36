//! The runtime's commands: `server`, `agent`, the client commands (`submit`, `jobs`, `job`,
//! `tasks`, `nodes`, `wait`, `cancel`), `demo`, `bench-dispatch`, and the hidden `kernel` that the
//! demo's tasks run.

mod accel_cli;
mod allocation;
mod begin;
mod bench;
mod client;
mod command_job;
mod demo;
mod demo_workflow;
mod dependency;
mod directives;
mod divisible;
mod hostlist;
pub mod human;
mod kernel;
mod log;
pub mod logging;
mod matrows;
mod placeholders;
mod purge;
mod scratch;
mod select;
mod serve;
mod usage;
mod users;
mod workflow;

use clap::{Args, Subcommand, ValueEnum};
pub use client::{JobRef, refused};
pub(crate) use serve::check_tls;
use std::path::PathBuf;

/// Runtime subcommands, flattened into the top-level command.
#[derive(Debug, Subcommand)]
pub enum RuntimeCommand {
    /// Run the server (resource manager): gRPC API, SQLite state, batch scheduling on heartbeats.
    Server(serve::ServerArgs),
    /// Run an agent (node manager) that registers with a server and runs its tasks.
    Agent(serve::AgentArgs),
    /// Submit a job: a job file (TOML applications of tasks), or a command after `--`
    /// (`hetsched submit --tasks 100 -- ./sim --seed {index}`); prints the job id.
    #[command(
        after_help = "Examples:\n  hetsched submit job.toml --wait\n  hetsched submit --tasks 100 --cores 2 -- ./sim --seed {index}\n  hetsched submit --shell -- 'sort big.txt > sorted.txt'"
    )]
    Submit {
        /// The job file (`-`: read it from standard input), or give a command after `--`
        /// instead.
        #[arg(conflicts_with = "command")]
        file: Option<PathBuf>,
        /// The command every task runs, with its arguments (instead of a job file); `{index}`
        /// is replaced by the task's index, and with `--each-line` `{entry}` by its line.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
        /// Wait for the job to finish (exit status: success only if every task succeeded).
        #[arg(long)]
        wait: bool,
        /// Idempotency key (at most 128 bytes; default: 128 random bits). A submission whose key
        /// the server already holds returns that job instead of creating another; `submit`
        /// retries with the same key when the server does not answer. An empty key is refused:
        /// it would be no key (a script's unset `$KEY` must not lose the idempotency unsaid).
        #[arg(long, value_name = "KEY", value_parser = clap::builder::NonEmptyStringValueParser::new())]
        submission_key: Option<String>,
        /// The job's name in listings (overrides `name =` in the file; default: that, else the
        /// file's path; for a command, the program's file name: every user lists every job's
        /// name, so it holds no argument).
        #[arg(long)]
        name: Option<String>,
        /// Run after these jobs — batch jobs, workflows or divisible jobs (ids, `last`, or
        /// `name:NAME` for every job of that name; repeat the flag or separate with commas):
        /// the tasks wait until every one of them has completed, and the job is cancelled if
        /// one ends failed or cancelled (Slurm's `--dependency=afterok`).
        #[arg(long, value_name = "JOB", value_delimiter = ',')]
        after: Vec<JobRef>,
        /// Run after these jobs (of any kind) have ended, however they ended — completed, failed
        /// or cancelled (ids, `last` or `name:NAME`; Slurm's `--dependency=afterany`): for a job
        /// that gathers or cleans up what the others left.
        #[arg(long, value_name = "JOB", value_delimiter = ',')]
        after_any: Vec<JobRef>,
        /// Run after these jobs (of any kind) have ended failed or cancelled (ids, `last` or
        /// `name:NAME`; Slurm's `--dependency=afternotok`): for a job that handles a failure; it
        /// is cancelled if one of them completes.
        #[arg(long, value_name = "JOB", value_delimiter = ',')]
        after_notok: Vec<JobRef>,
        /// Run each task after the tasks of the same index of these batch jobs (ids, `last` or
        /// `name:NAME`; Slurm's `--dependency=aftercorr`): task i starts once task i of each has
        /// succeeded — a pipeline of arrays — and is cancelled if one of them failed or was
        /// cancelled; the job's other tasks go on. Each index of this job must be one they have.
        #[arg(long, value_name = "JOB", value_delimiter = ',')]
        after_corr: Vec<JobRef>,
        /// Run once every unfinished job of this job's name (`--name`, the file's `name =`, or
        /// the program's file name), of any kind, has ended (Slurm's `--dependency=singleton`): one
        /// job of a name at a time, for a periodic job that must not overlap itself.
        #[arg(long)]
        singleton: bool,
        /// Run once these batch jobs have started — a task dispatched — or ended (ids, `last` or
        /// `name:NAME`; Slurm's `--dependency=after`): for a job that runs beside another, as a
        /// client beside its server.
        #[arg(long, value_name = "JOB", value_delimiter = ',')]
        after_start: Vec<JobRef>,
        /// Slurm's `--dependency` syntax, for scripts written for `sbatch`: `afterok:7:8` (=
        /// `--after 7,8`), `afterany:9` (= `--after-any 9`), `afternotok:10` (= `--after-notok
        /// 10`), `aftercorr:11` (= `--after-corr 11`), `after:12` (= `--after-start 12`),
        /// `singleton` (= `--singleton`), several separated by commas (all must hold).
        #[arg(long, value_name = "SPEC")]
        dependency: Vec<dependency::Dependency>,
        /// Submit the batch job held (Slurm's `--hold`): none of its tasks is dispatched until
        /// `hetsched release JOB` (then, with `--after`, once those jobs allow it too).
        #[arg(long)]
        hold: bool,
        /// Start the batch job's tasks no sooner than TIME (Slurm's `--begin`): `now+30m`,
        /// `now+60` (seconds), `16:00` (the next one), `midnight`, `noon`, `tomorrow`,
        /// `2026-12-01`, `2026-12-01T08:00` (local time) or `2026-12-01T08:00:00Z`; at most a
        /// year ahead. Until then `hetsched jobs` lists the job `deferred`
        #[arg(long, value_name = "TIME", value_parser = begin::parse)]
        begin: Option<u64>,
        /// Read submit flags from `#HETSCHED` lines at the top of the command's program (as
        /// `sbatch` reads `#SBATCH` lines): `auto` when its name ends in `.sh`, `file` always,
        /// `off` never; flags typed here win.
        #[arg(long, value_enum, value_name = "MODE", default_value_t = directives::Mode::Auto)]
        directives: directives::Mode,
        #[command(flatten)]
        client: ClientArgs,
        // Last: its help heading applies to what follows it.
        #[command(flatten)]
        job: Box<command_job::CommandJobArgs>,
    },
    /// Run a job's failed tasks (`--failed`) or its tasks cancelled one by one (`--cancelled`)
    /// again, a new attempt each (their retries count afresh); in a workflow, also the
    /// instances not run because of failed ones.
    #[command(group = clap::ArgGroup::new("which").required(true).multiple(true))]
    Resubmit {
        /// Job id, or `last` (the newest job).
        id: JobRef,
        /// Re-run the failed tasks (this, `--cancelled` or both).
        #[arg(long, group = "which")]
        failed: bool,
        /// Re-run the tasks cancelled one by one (`cancel JOB --tasks`; batch jobs, and a
        /// workflow's instances with those not run because of them; HyperQueue's `hq job
        /// resubmit --filter canceled`). With `--failed`, both.
        #[arg(long, group = "which")]
        cancelled: bool,
        /// Wait for the job to finish, as `submit --wait`.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List jobs.
    Jobs {
        /// Only jobs in these states (repeat the flag or separate with commas): pending,
        /// running, completed, failed, cancelled; `held`, `waiting` (for the jobs it runs
        /// `--after`) and `deferred` (its `--begin` time has not come) are pending or running
        /// jobs so marked; `active` = pending or running;
        /// `blocked`: no node can run their pending work now (they wait for an operator).
        #[arg(long, value_name = "STATE", value_delimiter = ',')]
        state: Vec<JobStateFilter>,
        /// Only the newest N jobs (of those the states select).
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        /// Only jobs with this name (`submit --name`; Slurm's `squeue --name`).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Only this user's jobs (`admin`: the admin's; Slurm's `squeue --user`).
        #[arg(long, value_name = "USER", conflicts_with = "mine")]
        user: Option<String>,
        /// Only your own jobs (those of the user the token names; Slurm's `squeue --me`).
        #[arg(long)]
        mine: bool,
        /// Every finished job too. Without it (and without --state, --last or --name) the table
        /// shows every unfinished job and the newest finished ones only, saying how many older
        /// ones it leaves out; `--output json` always lists every job.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show one job and its applications.
    Job {
        /// Job id, or `last` (the newest job).
        id: JobRef,
        /// A workflow's task graph instead (DOT with `--output dot`).
        #[arg(long)]
        graph: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Fetch the gathered output of a completed divisible job (`output = "concat"`).
    Output {
        /// Job id, or `last` (the newest job).
        id: JobRef,
        /// Write it as `job-ID.out` into this directory (created if missing) instead of to
        /// stdout.
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List tasks (of one job, or of every job), page by page as they arrive.
    Tasks {
        /// Only this job's tasks (its id, or `last`: the newest job).
        #[arg(long)]
        job: Option<JobRef>,
        /// Show at most this many tasks (default: all; at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
        /// Only tasks in these states (repeat the flag or separate with commas): pending,
        /// running, succeeded, failed, cancelled; workflow instances' waiting, ready (pending
        /// selects both); divisible chunks' out, done, lost.
        #[arg(
            long,
            value_name = "STATE",
            value_delimiter = ',',
            value_parser = clap::builder::PossibleValuesParser::new(
                hetsched_server::state::types::StateFilter::NAMES.iter().copied()
            )
        )]
        state: Vec<String>,
        /// Only tasks that ran, or run, on these nodes (repeat the flag, separate with commas or
        /// use brackets, `gpu[01-04]`; Slurm's `squeue --nodelist`): their latest attempt's
        /// node, any node of a multi-node task, or the node an accelerator task was offloaded
        /// to.
        #[arg(long, value_name = "NODES", value_parser = hostlist::expand)]
        node: Vec<Vec<String>>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List nodes (agents) with their free resources and the hetsched version of each agent.
    Nodes {
        /// Only these nodes: names separated by commas or in brackets, `gpu[01-04]` (Slurm's
        /// `sinfo --nodes`).
        #[arg(value_name = "NODES", value_parser = hostlist::expand)]
        names: Vec<Vec<String>>,
        /// Only nodes in these states (repeat the flag or separate with commas; Slurm's `sinfo
        /// --states`).
        #[arg(long, value_name = "STATE", value_delimiter = ',')]
        state: Vec<NodeStateFilter>,
        /// Also the nodes whose agents left on purpose (their time limit or idle timeout
        /// ended, a signal or `hetsched node stop` stopped them): `left (idle-timeout)`,
        /// `left (operator)`… in the `alive` column. Dead
        /// nodes, whose agents stopped heartbeating, are always listed.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the automatic allocation queues (the server configuration's `[[allocation]]`) and
    /// their allocations as the batch system last listed them
    Allocations {
        /// Ask the batch system whether it would take one allocation of each queue, without
        /// running any (Slurm: `sbatch --test-only`; PBS: submitted held and deleted at once):
        /// a wrong partition, account or limit shows now, not when work waits. Exits 1 when a
        /// queue fails.
        #[arg(long)]
        check: bool,
        /// With `--check`: only this queue.
        #[arg(long, requires = "check")]
        queue: Option<String>,
        /// Submit no more allocations for this queue (those it has go on) until `--resume`;
        /// kept across a server restart.
        #[arg(long, value_name = "QUEUE", conflicts_with_all = ["check", "resume"])]
        pause: Option<String>,
        /// Let a paused queue submit allocations again.
        #[arg(long, value_name = "QUEUE", conflicts_with = "check")]
        resume: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the accelerator binding map per rack (spec 01): each ANode with its NNodes and its
    /// accelerator service's queue lengths, and the NNodes left unbound.
    Bindings {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Manage nodes (`hetsched node remove|drain|resume|stop NAME`).
    #[command(subcommand)]
    Node(NodeCommand),
    /// Manage users (`hetsched user add|remove|list|limit|whoami`): the admin (who holds the server's
    /// DATA_DIR/token) gives each user a token of its own; a user's jobs are its own to change.
    #[command(subcommand)]
    User(UserCommand),
    /// Print a task's captured stdout (or stderr), read from the agent that ran it; of a divisible
    /// job, a chunk's.
    #[command(
        override_usage = "hetsched log [OPTIONS] <JOB> <TASK>\n       hetsched log [OPTIONS] <JOB> --all"
    )]
    Log {
        /// Job id, or `last` (the newest job).
        job: JobRef,
        /// The task: its id (the `task` column of `hetsched tasks`) or APP:INDEX; of a divisible
        /// job, a chunk's number (`3` or `chunk:3`, as `hetsched job N --output json` lists them).
        #[arg(required_unless_present = "all")]
        task: Option<String>,
        /// Every task's output instead of one's, in task order (HyperQueue's `job cat`): the
        /// latest attempt of each task that ran.
        #[arg(long, conflicts_with_all = ["task", "attempt", "follow"])]
        all: bool,
        /// With `--all`: only tasks in these states (as `hetsched tasks --state`).
        #[arg(long, value_name = "STATE", value_delimiter = ',', requires = "all")]
        state: Vec<String>,
        /// With `--all`: a line before each task's output naming it (`==> task 3 (a:3,
        /// succeeded on n1) <==`).
        #[arg(long, requires = "all")]
        header: bool,
        /// Show stderr instead of stdout.
        #[arg(long)]
        stderr: bool,
        /// Which attempt, from 1 (default: the latest).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        attempt: Option<u32>,
        /// Keep printing new output while the task runs (one that has not started yet — held,
        /// waiting, queued — is waited for).
        #[arg(long, short = 'f')]
        follow: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Wait until jobs finish; fails unless every task of each succeeded.
    Wait {
        /// Jobs: ids, ranges (`4-9`: the jobs listed in it), `name:NAME` (the jobs listed with
        /// that name), `last` (the newest job) or `all` (every job not finished); separate with
        /// spaces or commas.
        #[arg(required = true, value_name = "JOB", value_delimiter = ',', num_args = 1..)]
        ids: Vec<select::JobItem>,
        /// Give up after this long (e.g. `10m`; for all the jobs together): exit status 124
        /// (unless a job failed: 1), naming the jobs still unfinished.
        #[arg(long, value_parser = duration_flag)]
        timeout: Option<humantime::Duration>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cancel jobs: pending tasks are dropped, running ones stopped (SIGTERM, then SIGKILL after
    /// the agent's kill grace).
    Cancel {
        /// Jobs: ids, ranges (`4-9`: the jobs listed in it), `name:NAME` (the jobs listed with
        /// that name), `last` (the newest job) or `all` (every job not finished); separate with
        /// spaces or commas.
        #[arg(required = true, value_name = "JOB", value_delimiter = ',', num_args = 1..)]
        ids: Vec<select::JobItem>,
        /// Only the tasks with these indices, of one job (`3,7-9`, `0-99:2`; the syntax of
        /// `submit --array`): the rest of the job goes on, and it ends `cancelled` (Slurm's `scancel
        /// JOB_[3,7-9]`). In a workflow: the instances with these `{index}` values, and every
        /// instance depending on them.
        #[arg(long, value_name = "INDICES")]
        tasks: Option<String>,
        /// With `--tasks`: only this application's tasks, or this workflow task's instances
        /// (default: every application's or task's).
        #[arg(long, value_name = "NAME", requires = "tasks")]
        app: Option<String>,
        /// Send this signal to the running tasks instead, cancelling nothing, as Slurm's
        /// `scancel --signal` does (the same as `hetsched signal JOB --signal SIG`).
        #[arg(short = 's', long, value_name = "SIG")]
        signal: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Send a signal to jobs' running tasks (Slurm's `scancel --signal`): `USR1` to checkpoint
    /// now, `HUP` to reopen logs, `STOP`/`CONT` to pause and resume; nothing is cancelled. Each
    /// task's agent sends it to the task's process group at its next heartbeat, once (a
    /// divisible job's: to the chunk each agent computes)
    Signal {
        /// Jobs: ids, ranges (`4-9`: the jobs listed in it), `name:NAME` (the jobs listed with
        /// that name), `last` (the newest job) or `all` (every job not finished); separate with
        /// spaces or commas.
        #[arg(required = true, value_name = "JOB", value_delimiter = ',', num_args = 1..)]
        ids: Vec<select::JobItem>,
        /// The signal, as `kill -l` names it, with or without `SIG`: HUP, INT, QUIT, USR1,
        /// USR2, ALRM, TERM, CONT, URG, WINCH, STOP, TSTP or KILL.
        #[arg(short = 's', long, value_name = "SIG")]
        signal: String,
        /// Only the tasks with these indices, of one job (`3,7-9`, `0-99:2`; the syntax of
        /// `submit --array`); in a workflow, the instances with these `{index}` values.
        #[arg(long, value_name = "INDICES")]
        tasks: Option<String>,
        /// Only this application's tasks, or this workflow task's instances (default: every
        /// application's or task's).
        #[arg(long, value_name = "NAME")]
        app: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Hold batch jobs: their pending tasks are not dispatched until `hetsched release` (running
    /// ones go on; a task that fails and retries, or is lost, waits too)
    Hold {
        /// Jobs: ids, ranges (`4-9`: the jobs listed in it), `name:NAME` (the jobs listed with
        /// that name), `last` (the newest job) or `all` (every job not finished); separate with
        /// spaces or commas.
        #[arg(required = true, value_name = "JOB", value_delimiter = ',', num_args = 1..)]
        ids: Vec<select::JobItem>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Release held batch jobs: their pending tasks are dispatched again (once the jobs they run
    /// `--after` allow it)
    Release {
        /// Jobs: ids, ranges (`4-9`: the jobs listed in it), `name:NAME` (the jobs listed with
        /// that name), `last` (the newest job) or `all` (every job not finished); separate with
        /// spaces or commas.
        #[arg(required = true, value_name = "JOB", value_delimiter = ',', num_args = 1..)]
        ids: Vec<select::JobItem>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Change batch jobs' priority, max_running, time limit, cores, memory, GPUs, GPU kind,
    /// requires or begin time after submission (Slurm's `scontrol update`): pending tasks are placed and run
    /// by the new values; running ones go on, under the new time limit (counted from their
    /// start), keeping the cores, memory and devices they were given
    Update {
        /// Jobs: ids, ranges (`4-9`: the jobs listed in it), `name:NAME` (the jobs listed with
        /// that name), `last` (the newest job) or `all` (every job not finished); separate with
        /// spaces or commas.
        #[arg(required = true, value_name = "JOB", value_delimiter = ',', num_args = 1..)]
        ids: Vec<select::JobItem>,
        /// Only this application of each job (default: every application).
        #[arg(long, value_name = "NAME")]
        app: Option<String>,
        /// The new priority: higher is served first (a job file's `priority`).
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        priority: Option<i32>,
        /// The new cap on tasks running at once, 0 for none (a job file's `max_running`).
        #[arg(long, value_name = "N")]
        max_running: Option<u32>,
        /// The new wall-clock limit of each task, every variant, running ones too (counted from
        /// their start): `90s`, `2h`, `1h30m`; `none` (or 0) for no limit (a job file's
        /// `time_limit`).
        #[arg(long, value_name = "DURATION", value_parser = parse_time_limit)]
        time_limit: Option<u64>,
        /// The new cores of one task still to start (a job file's `cores`), as Slurm changes
        /// the `NumCPUs` of an array's pending tasks; a running task keeps its own.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        cores: Option<u32>,
        /// The new memory of one task still to start, enforced by its agent: `512MiB`, `8GiB`;
        /// `none` (or 0) for none declared (a job file's `memory`); a running task keeps its
        /// own.
        #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
        memory: Option<u64>,
        /// The new devices of one task of the GPU variant still to start (a job file's
        /// `gpus`); a running task keeps its own.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        gpus: Option<u32>,
        /// The accelerator kind the GPU variant's tasks still to start take (a job file's
        /// `kind`, Slurm's `Gres=gpu:TYPE:N`): `a100`; `any` for any kind. Running tasks keep
        /// their devices.
        #[arg(long, value_name = "KIND")]
        gpu_kind: Option<String>,
        /// The variant whose `--cores` and `--memory` change (default: every variant the
        /// application has).
        #[arg(long, value_name = "cpu|gpu", value_parser = ["cpu", "gpu"])]
        variant: Option<String>,
        /// The node attributes its tasks require from now on, separated by commas (a job
        /// file's `requires`; Slurm's `Features`); `none` for none. Tasks running stay; a
        /// multi-node task's gathering lets go of the nodes that lack them.
        #[arg(long, value_name = "ATTR,…")]
        requires: Option<String>,
        /// The job's new begin time (Slurm's `StartTime=`), as `submit --begin` takes it:
        /// `now+1h`, `16:00`, `2026-12-01T08:00`; `now` lets its tasks start at once. Its
        /// pending tasks wait until then; running ones go on.
        #[arg(long, value_name = "TIME", value_parser = begin::parse)]
        begin: Option<u64>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete finished jobs from the server and its store: by id, `--older-than DURATION` or
    /// `--keep N` (see docs/runtime.md, Retention).
    Purge(purge::PurgeArgs),
    /// The accounts (Slurm's `sreport … AccountUtilizationByUser`): the core-, GPU- and
    /// memory-hours each user's running work held over a span of UTC days (the last 30 unless
    /// `--since`), per user or per day. The admin sees every user's, the admin's own as
    /// `admin`; a user sees its own. Kept by the server; not purged with the jobs.
    Usage {
        /// First day: `YYYY-MM-DD` (UTC), `today`, or `Nd` for N days ago (`7d`).
        #[arg(long, value_name = "DAY", value_parser = usage::parse_day)]
        since: Option<u32>,
        /// Last day (included), as `--since`; today unless given.
        #[arg(long, value_name = "DAY", value_parser = usage::parse_day)]
        until: Option<u32>,
        /// A row per day and user instead of per user.
        #[arg(long)]
        by_day: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Start a server and three agents (one with GPUs) on loopback, run a small mixed workload of
    /// real linear-algebra tasks, and show where each ran and the makespan.
    Demo(demo::DemoArgs),
    /// Measure dispatch throughput: N `true` tasks through 1 server and `--agents` agents
    /// (default 2) on loopback.
    BenchDispatch(bench::BenchArgs),
    /// A demo task: a dense LU, QR or Cholesky solve with faer (what `demo` runs).
    #[command(hide = true)]
    Kernel(kernel::KernelArgs),
    /// A divisible-load chunk: rows of a matrix product with faer (what divisible demos run).
    #[command(hide = true)]
    Matrows(matrows::MatRowsArgs),
}

/// `hetsched user …`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user with a token of its own (admin only). The token is shown once (the server
    /// keeps only its SHA-256): printed, or written with `--save` to a new file of mode 0600.
    /// The user then passes `--token-file FILE` (or sets HETSCHED_TOKEN_FILE).
    Add {
        /// 1 to 32 characters: lower-case letters, digits, `.`, `_`, `-`, starting with a
        /// letter (`admin` is the admin's).
        name: String,
        /// The user exists: give it a new token; its old one is refused from now on.
        #[arg(long)]
        rotate: bool,
        /// Write the token to this file (created, mode 0600; refused if it exists) instead of
        /// printing it.
        #[arg(long, value_name = "FILE")]
        save: Option<PathBuf>,
        /// Its caps, as `user limit` (a new user: none unless given; a rotation keeps those not
        /// given).
        #[command(flatten)]
        caps: UserCaps,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cap what a user's running batch tasks and workflow instances hold at once (admin only;
    /// Slurm's `MaxTRESPerUser=cpu=N,mem=S,gres/gpu=M`): a task starts only while what they
    /// hold with it stays within every cap (a multi-node task counts everything of its nodes).
    /// Caps not given keep their values. Tasks running keep theirs; `hetsched jobs` says why
    /// the rest wait. `--shares` sets the user's weight under `[fair_share]`;
    /// `--max-priority` the highest priority its work may have.
    #[command(group(
        clap::ArgGroup::new("caps")
            .required(true)
            .multiple(true)
            .args(["max_cores", "max_memory", "max_gpus", "shares", "max_priority"])
    ))]
    Limit {
        /// The user's name.
        name: String,
        #[command(flatten)]
        caps: UserCaps,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Remove a user (admin only): its token is refused from the next call on. Its jobs go on
    /// and stay its own (the admin can still change them); adding the name again gives them
    /// back to it.
    Remove {
        /// The user's name.
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the users with when their tokens were made and how many jobs each has (admin only).
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print who the token says you are (`admin` for the admin token), and which hetsched
    /// version the server runs (beside this client's).
    Whoami {
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// `hetsched node …`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Remove a dead node: it is no longer listed, counted in submission checks or offered to
    /// the policy, and its name is free for another agent. A live node is refused.
    Remove {
        /// The node's name; several separated by commas or in brackets (`gpu[01-04]`): each in
        /// turn, a line each, going on past a refusal (automatic allocation leaves many).
        #[arg(required = true, value_name = "NODES", num_args = 1.., value_parser = hostlist::expand)]
        name: Vec<Vec<String>>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Drain a node: no new work is placed on it; its running tasks finish. Lasts until
    /// `node resume`, through server restarts (the drain is stored before it is acknowledged).
    Drain {
        /// The node's name; several separated by commas or in brackets, as Slurm writes them
        /// (`gpu[01-04,07]`): each in turn, a line each, going on past a refusal.
        #[arg(required = true, value_name = "NODES", num_args = 1.., value_parser = hostlist::expand)]
        name: Vec<Vec<String>>,
        /// Why (Slurm's `Reason=`): `hetsched nodes` shows it beside the drain, with its time.
        /// Draining a drained node again gives it the new reason.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop a node's agent remotely (HyperQueue's `hq worker stop`): it shuts down as on a
    /// SIGTERM — no new work, its running tasks stopped and run again elsewhere (with
    /// `--drain`: left to end), their results reported — and exits; the node is listed as left
    /// (`operator`, `hetsched nodes --all`).
    Stop {
        /// The node's name; several separated by commas or in brackets (`gpu[01-04]`).
        #[arg(required = true, value_name = "NODES", num_args = 1.., value_parser = hostlist::expand)]
        name: Vec<Vec<String>>,
        /// Let the running tasks end first instead of stopping them.
        #[arg(long)]
        drain: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Resume a drained node: it takes new work again (also `undrain`).
    #[command(visible_alias = "undrain")]
    Resume {
        /// The node's name; several separated by commas or in brackets (`gpu[01-04]`).
        #[arg(required = true, value_name = "NODES", num_args = 1.., value_parser = hostlist::expand)]
        name: Vec<Vec<String>>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// A state `hetsched nodes --state` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NodeStateFilter {
    /// Alive and taking work, running nothing.
    Idle,
    /// Alive and running something.
    Busy,
    /// Drained by an operator (`hetsched node drain`), alive or dead (a dead one comes back
    /// drained).
    Drained,
    /// Its agent is shutting down (a signal, its time limit) or was asked to stop (`hetsched
    /// node stop`).
    Leaving,
    /// Restored at the server's restart, its agent not back yet, though it may still be
    /// (`returning_ms`): not dead yet.
    Returning,
    /// Its agent stopped heartbeating.
    Dead,
    /// Its agent left on purpose (with or without `--all`).
    Left,
}

impl NodeStateFilter {
    /// Whether node `n` is in this state.
    pub fn selects(self, n: &hetsched_proto::NodeInfo) -> bool {
        let taking = n.alive && !n.drained && !n.draining && !n.stopping;
        match self {
            NodeStateFilter::Idle => taking && n.running == 0,
            NodeStateFilter::Busy => n.alive && n.running > 0,
            NodeStateFilter::Drained => n.drained && n.left.is_empty(),
            NodeStateFilter::Leaving => n.alive && (n.draining || n.stopping),
            NodeStateFilter::Returning => !n.alive && n.returning_ms.is_some(),
            NodeStateFilter::Dead => !n.alive && n.left.is_empty() && n.returning_ms.is_none(),
            NodeStateFilter::Left => !n.left.is_empty(),
        }
    }
}

/// A state `hetsched jobs --state` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum JobStateFilter {
    /// No task has started yet.
    Pending,
    /// Some task has started, some is not finished.
    Running,
    /// Every task succeeded.
    Completed,
    /// Every task finished, some failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Held by `hetsched hold`.
    Held,
    /// Waiting for the jobs it runs `--after`.
    Waiting,
    /// Its begin time (`submit --begin`) has not come.
    Deferred,
    /// Pending or running.
    Active,
    /// No node can run its pending work now (none has what it needs, or each that has is
    /// drained): it waits for an operator (`pending because` says why).
    Blocked,
}

impl JobStateFilter {
    /// Whether job `j` is in this state.
    pub fn selects(self, j: &hetsched_proto::JobInfo) -> bool {
        match self {
            JobStateFilter::Pending => j.state == "pending",
            JobStateFilter::Running => j.state == "running",
            JobStateFilter::Completed => j.state == "completed",
            JobStateFilter::Failed => j.state == "failed",
            JobStateFilter::Cancelled => j.state == "cancelled",
            JobStateFilter::Held => j.held && client::unfinished(j),
            JobStateFilter::Waiting => j.waiting && client::unfinished(j),
            JobStateFilter::Deferred => j.deferred && client::unfinished(j),
            JobStateFilter::Active => matches!(j.state.as_str(), "pending" | "running"),
            JobStateFilter::Blocked => j.blocked,
        }
    }
}

/// How read commands print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table for people.
    #[default]
    Table,
    /// JSON for programs.
    Json,
    /// Graphviz DOT (`hetsched job N --graph`; other commands print their table).
    Dot,
}

/// Where the server is and how to prove who we are.
#[derive(Clone, Debug, Args)]
pub struct ClientArgs {
    /// Server URL: `http://HOST:PORT`, `https://HOST:PORT`, or `HOST[:PORT]` as the server
    /// writes it to DATA_DIR/address (https:// with --ca; port 7420 when none is given).
    #[arg(long, env = "HETSCHED_SERVER", default_value = "http://127.0.0.1:7420", value_parser = parse_server)]
    pub server: String,
    /// File holding your token: the admin's (the server writes DATA_DIR/token) or a user's own
    /// (`hetsched user add NAME --save FILE`). Without the flag or HETSCHED_TOKEN_FILE, and with
    /// no `hetsched-data/token` here, `~/.config/hetsched/token` (`$XDG_CONFIG_HOME`) is read.
    #[arg(
        long,
        env = "HETSCHED_TOKEN_FILE",
        default_value = DEFAULT_TOKEN_FILE
    )]
    pub token_file: PathBuf,
    /// CA certificate (PEM) for an `https://` server.
    #[arg(long, env = "HETSCHED_CA")]
    pub ca: Option<PathBuf>,
    /// Output format of read commands.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `--server`: refused at once, saying what is expected, unless [`serve::server_url`] reads it.
fn parse_server(raw: &str) -> Result<String, String> {
    serve::server_url(raw, false)
        .map(|_| raw.to_string())
        .map_err(|e| format!("{e:#}"))
}

/// Where a client looks for its token first (the data directory of a server started here).
const DEFAULT_TOKEN_FILE: &str = "hetsched-data/token";

impl ClientArgs {
    /// The token file to read: `--token-file` (or HETSCHED_TOKEN_FILE) as given; left at its
    /// default with no `hetsched-data/token` here, the user's own in its configuration directory
    /// (`$XDG_CONFIG_HOME/hetsched/token`, else `~/.config/hetsched/token`) when that exists.
    pub fn token_path(&self) -> PathBuf {
        if self.token_file != std::path::Path::new(DEFAULT_TOKEN_FILE) || self.token_file.exists() {
            return self.token_file.clone();
        }
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
        match config.map(|c| c.join("hetsched").join("token")) {
            Some(own) if own.exists() => own,
            _ => self.token_file.clone(),
        }
    }

    /// The server's URL ([`serve::server_url`]: a bare `HOST[:PORT]` completed).
    pub fn url(&self) -> String {
        // Checked by `parse_server` when the arguments were read.
        serve::server_url(&self.server, self.ca.is_some()).unwrap_or_else(|_| self.server.clone())
    }

    /// The token to send ([`ClientArgs::token_path`], read and checked).
    pub fn token(&self) -> anyhow::Result<String> {
        serve::read_token(&self.token_path(), serve::TokenReader::Client)
    }
}

impl RuntimeCommand {
    /// Whether the command runs until stopped (server, agent, demo, bench): those keep Rust's
    /// ignored SIGPIPE, which their sockets need.
    pub fn long_running(&self) -> bool {
        matches!(
            self,
            RuntimeCommand::Server(_)
                | RuntimeCommand::Agent(_)
                | RuntimeCommand::Demo(_)
                | RuntimeCommand::BenchDispatch(_)
        )
    }
}

/// A duration flag (`--kill-grace`, `--dead-timeout`, `wait --timeout`, …): as job files and
/// `--time-limit` write it (`90s`, `1.5m`, Slurm's `05:00` and `1-00:00:00`), or in humantime's
/// forms the flags read before (`1h 30m`, `2days`), so one spelling works everywhere.
pub(crate) fn duration_flag(s: &str) -> Result<humantime::Duration, String> {
    match s.parse::<hetsched_core::input::Duration>() {
        Ok(d) => Ok(std::time::Duration::from_nanos(d.0).into()),
        Err(e) => s.trim().parse::<humantime::Duration>().map_err(|_| e),
    }
}

/// `hetsched update --time-limit`: a duration as job files write it (`90s`, `2h`, `1h30m`), in
/// ms; `none` or `0` for no limit.
fn parse_time_limit(s: &str) -> Result<u64, String> {
    match s.trim() {
        "none" | "0" => Ok(0),
        t => {
            let d: hetsched_core::input::Duration = t.parse()?;
            // 0 is no limit, as in a job file; a limit under 1 ms must not read as none.
            Ok(if d.0 == 0 {
                0
            } else {
                (d.0 / 1_000_000).max(1)
            })
        }
    }
}

/// A user's caps on what its running tasks hold at once (`user add`, `user limit`).
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct UserCaps {
    /// The most cores at once; `none` (or 0) for no cap.
    #[arg(long, value_name = "N", value_parser = parse_max_cores)]
    pub max_cores: Option<u32>,
    /// The most memory at once, a size as job files write it (`64GiB`); `none` (or 0) for no
    /// cap. Tasks count the memory they declare.
    #[arg(long, value_name = "SIZE", value_parser = parse_max_memory)]
    pub max_memory: Option<u64>,
    /// The most GPUs at once; `none` (or 0) for no cap.
    #[arg(long, value_name = "N", value_parser = parse_max_gpus)]
    pub max_gpus: Option<u32>,
    /// Its fair-share shares, 1 to 1,000,000 (default 1; with the server's `[fair_share]`, its
    /// usage is divided by them: 2 shares may use twice what 1 does before falling behind).
    #[arg(long, value_name = "N")]
    pub shares: Option<u32>,
    /// The highest priority it may give its batch work — in job files, `submit --priority`
    /// and `update --priority` (higher ones are refused); `none` for no cap. With the server's
    /// `preemption = "requeue"` it bounds whose running work its work may stop.
    #[arg(long, value_name = "N", value_parser = parse_max_priority, allow_hyphen_values = true)]
    pub max_priority: Option<PriorityCap>,
}

/// `hetsched user limit --max-priority`: a priority, or `none`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriorityCap {
    /// Work of this priority at most.
    At(i32),
    /// No cap.
    None,
}

fn parse_max_priority(s: &str) -> Result<PriorityCap, String> {
    match s.trim() {
        "none" => Ok(PriorityCap::None),
        t => t
            .parse()
            .map(PriorityCap::At)
            .map_err(|_| format!("`{t}`: a priority (an integer), or `none` for no cap")),
    }
}

/// `hetsched user limit --max-cores`: a number of cores, `none` or `0` for no cap.
fn parse_max_cores(s: &str) -> Result<u32, String> {
    parse_cap(s, "cores")
}

/// `hetsched user limit --max-gpus`: a number of GPUs, `none` or `0` for no cap.
fn parse_max_gpus(s: &str) -> Result<u32, String> {
    parse_cap(s, "GPUs")
}

fn parse_cap(s: &str, what: &str) -> Result<u32, String> {
    match s.trim() {
        "none" => Ok(0),
        t => t
            .parse()
            .map_err(|_| format!("`{t}`: a number of {what}, or `none` for no cap")),
    }
}

/// `hetsched update --memory`: a size as job files write it (`512MiB`, `8GiB`), in bytes;
/// `none` or `0` for none declared. Under 1 MiB is refused, as at submission.
fn parse_memory(s: &str) -> Result<u64, String> {
    let bytes = parse_size(s, "none declared")?;
    match hetsched_core::input::limits::task_memory_floor_problem(bytes) {
        Some(problem) => Err(problem),
        None => Ok(bytes),
    }
}

/// `hetsched user limit --max-memory`: a size as job files write it, in bytes; `none` or `0`
/// for no cap.
fn parse_max_memory(s: &str) -> Result<u64, String> {
    parse_size(s, "no cap")
}

/// A size as job files write it, in bytes; `none` or `0` for 0, which means `none_is`. clap
/// names the flag and the value before a refusal, so the refusal says only what a size is: the
/// `bytesize` crate's own words (`couldn't parse "lots" into a known SI unit`) name neither.
fn parse_size(s: &str, none_is: &str) -> Result<u64, String> {
    match s.trim() {
        "none" | "0" => Ok(0),
        // Read as a job file reads it (a fraction of a byte and a size past 16 EiB refused,
        // not read as 0 or saturated, as the `bytesize` crate would); a text that crate does
        // not read either is no size at all, said in these words.
        t => hetsched_core::input::size_bytes(t).map_err(|e| {
            if t.parse::<bytesize::ByteSize>().is_ok() {
                e
            } else {
                format!(
                    "it is not a size such as 512MiB, 8GiB or 2GB (a number and a unit: B, \
                     KB, MB, GB, TB, KiB, MiB, GiB or TiB; or a number of bytes), nor `none` \
                     for {none_is}"
                )
            }
        }),
    }
}

/// Runs a runtime command.
pub fn run(cmd: RuntimeCommand) -> anyhow::Result<()> {
    match cmd {
        RuntimeCommand::Kernel(args) => kernel::run(&args),
        RuntimeCommand::Matrows(args) => matrows::run(&args),
        RuntimeCommand::BenchDispatch(args) => bench::run(&args),
        cmd => {
            // A client command makes a few calls and exits: one thread spares it the worker
            // threads' start-up and the hand-offs between them (a third of `hetsched jobs`'
            // own time); the server, the agent and the demo serve many connections at once.
            let rt = if cmd.long_running() {
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?
            } else {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
            };
            rt.block_on(async {
                match run_async(cmd).await {
                    Err(e) => Err(client::diagnose(e).await),
                    ok => ok,
                }
            })
        }
    }
}

async fn run_async(cmd: RuntimeCommand) -> anyhow::Result<()> {
    match cmd {
        RuntimeCommand::Server(a) => serve::server(a).await,
        RuntimeCommand::Agent(a) => serve::agent(a).await,
        RuntimeCommand::Submit {
            file,
            command,
            mut job,
            wait,
            submission_key,
            mut name,
            mut after,
            mut after_any,
            mut after_notok,
            mut after_corr,
            mut singleton,
            mut after_start,
            dependency,
            mut hold,
            mut begin,
            directives,
            client,
        } => {
            for d in dependency {
                after.extend(d.after);
                after_any.extend(d.after_any);
                after_notok.extend(d.after_notok);
                after_corr.extend(d.after_corr);
                singleton |= d.singleton;
                after_start.extend(d.after_start);
            }
            if file.is_none() {
                let mut named = directives::Named {
                    after: &mut after,
                    after_any: &mut after_any,
                    after_notok: &mut after_notok,
                    after_corr: &mut after_corr,
                    singleton: &mut singleton,
                    after_start: &mut after_start,
                };
                directives::of_command(directives, &command, job.shell)?
                    .fill(&mut name, &mut named, &mut hold, &mut begin, &mut job)?;
            }
            let source = match file {
                Some(file) => {
                    if let Some(flag) = job.first_given() {
                        anyhow::bail!(
                            "{flag} is for a command given after `--`; a job file sets its own \
                             fields (see docs/runtime.md, \"Job files\")"
                        );
                    }
                    client::JobSource::File(file)
                }
                None if command.is_empty() => anyhow::bail!(
                    "nothing to submit: give a job file (`hetsched submit job.toml`) or a command \
                     after `--` (`hetsched submit --tasks 10 -- ./prog --seed {{index}}`)"
                ),
                None => {
                    client::JobSource::Command(command_job::build(&job, &command, name.as_deref())?)
                }
            };
            // (`name:NAME` in these lists: every job of that name.)
            let after_ids = resolve_jobs(after, &client).await?;
            let after_any_ids = resolve_jobs(after_any, &client).await?;
            let after_notok_ids = resolve_jobs(after_notok, &client).await?;
            let after_corr_ids = resolve_jobs(after_corr, &client).await?;
            let after_start_ids = resolve_jobs(after_start, &client).await?;
            let after = client::After {
                started: after_start_ids,
                completed: after_ids,
                ended: after_any_ids,
                failed: after_notok_ids,
                corresponding: after_corr_ids,
                singleton,
                release: hold,
                begin_ms: begin,
            };
            client::submit(&client, source, wait, submission_key, name, after).await
        }
        RuntimeCommand::Resubmit {
            id,
            failed,
            cancelled,
            wait,
            client,
        } => {
            let id = id.resolve(&client).await?;
            client::resubmit(&client, id, failed, cancelled, wait).await
        }
        RuntimeCommand::Jobs {
            state,
            last,
            name,
            user,
            mine,
            all,
            client,
        } => {
            let owner = match (user, mine) {
                (Some(u), _) => Some(u),
                (None, true) => Some(users::whoami_name(&client).await?.name),
                (None, false) => None,
            };
            let select = client::JobsSelect {
                states: &state,
                last,
                name: name.as_deref(),
                owner: owner.as_deref(),
                all,
            };
            client::jobs(&client, select).await
        }
        RuntimeCommand::Job { id, graph, client } if graph => {
            workflow::graph(&client, id.resolve(&client).await?).await
        }
        RuntimeCommand::Job { id, client, .. } => {
            client::job(&client, id.resolve(&client).await?).await
        }
        RuntimeCommand::Output { id, out, client } => {
            divisible::output(&client, id.resolve(&client).await?, out.as_deref()).await
        }
        RuntimeCommand::Tasks {
            job,
            limit,
            state,
            node,
            client,
        } => {
            let job = match job {
                Some(j) => Some(j.resolve(&client).await?),
                None => None,
            };
            client::tasks(&client, job, limit, state, node.concat()).await
        }
        RuntimeCommand::Nodes {
            names,
            state,
            all,
            client,
        } => {
            // Nodes that left are listed only with `--all`: asking for them says it.
            let all = all || state.contains(&NodeStateFilter::Left);
            client::nodes(&client, all, &names.concat(), &state).await
        }
        RuntimeCommand::Allocations {
            check: true,
            queue,
            client,
            ..
        } => client::check_allocations(&client, queue.unwrap_or_default()).await,
        RuntimeCommand::Allocations {
            pause: Some(queue),
            client,
            ..
        } => client::pause_allocations(&client, queue, true).await,
        RuntimeCommand::Allocations {
            resume: Some(queue),
            client,
            ..
        } => client::pause_allocations(&client, queue, false).await,
        RuntimeCommand::Allocations { client, .. } => client::allocations(&client).await,
        RuntimeCommand::Bindings { client } => accel_cli::bindings(&client).await,
        RuntimeCommand::Wait {
            ids,
            timeout,
            client,
        } => {
            let timeout = timeout.map(Into::into);
            // Connected first, riding out a server that does not answer yet as `submit` does
            // (a restart between a script's `submit` and its `wait last`); then `last`, names
            // and ranges are resolved on the server that answers.
            let api = client::connect_retrying(&client, timeout).await?;
            let sel = select::resolve(&ids, &client).await?;
            client::wait(api, &client, &sel, timeout).await
        }
        RuntimeCommand::Cancel {
            ids,
            tasks,
            app,
            signal,
            client,
        } => {
            let sel = select::resolve(&ids, &client).await?;
            match signal {
                Some(sig) => {
                    client::signal(&client, &sel, &sig, tasks.as_deref(), app.as_deref()).await
                }
                None => client::cancel(&client, &sel, tasks.as_deref(), app.as_deref()).await,
            }
        }
        RuntimeCommand::Signal {
            ids,
            signal,
            tasks,
            app,
            client,
        } => {
            let sel = select::resolve(&ids, &client).await?;
            client::signal(&client, &sel, &signal, tasks.as_deref(), app.as_deref()).await
        }
        RuntimeCommand::Hold { ids, client } => {
            let sel = select::resolve(&ids, &client).await?;
            client::hold(&client, &sel, true).await
        }
        RuntimeCommand::Release { ids, client } => {
            let sel = select::resolve(&ids, &client).await?;
            client::hold(&client, &sel, false).await
        }
        RuntimeCommand::Update {
            ids,
            app,
            priority,
            max_running,
            time_limit,
            cores,
            memory,
            gpus,
            gpu_kind,
            variant,
            requires,
            begin,
            client,
        } => {
            let resources = cores.is_some() || memory.is_some() || gpus.is_some();
            if priority.is_none()
                && max_running.is_none()
                && time_limit.is_none()
                && !resources
                && requires.is_none()
                && gpu_kind.is_none()
                && begin.is_none()
            {
                anyhow::bail!(
                    "nothing to update: give --priority, --max-running, --time-limit, --cores, \
                     --memory, --gpus, --gpu-kind, --requires or --begin"
                );
            }
            if variant.is_some() && !resources {
                anyhow::bail!(
                    "--variant names whose --cores, --memory or --gpus change: give one of them"
                );
            }
            let sel = select::resolve(&ids, &client).await?;
            let update = client::Update {
                app: app.unwrap_or_default(),
                priority,
                max_running,
                time_limit_ms: time_limit,
                cores,
                memory_bytes: memory,
                gpus,
                gpu_kind: gpu_kind.map(|k| if k.trim() == "any" { String::new() } else { k }),
                variant: variant.unwrap_or_default(),
                requires: requires.map(|r| if r.trim() == "none" { String::new() } else { r }),
                begin_ms: begin,
            };
            client::update(&client, &sel, &update).await
        }
        RuntimeCommand::User(UserCommand::Add {
            name,
            rotate,
            save,
            caps,
            client,
        }) => users::add(&client, &name, rotate, save.as_deref(), caps).await,
        RuntimeCommand::User(UserCommand::Limit { name, caps, client }) => {
            users::limit(&client, &name, caps).await
        }
        RuntimeCommand::User(UserCommand::Remove { name, client }) => {
            users::remove(&client, &name).await
        }
        RuntimeCommand::User(UserCommand::List { client }) => users::list(&client).await,
        RuntimeCommand::User(UserCommand::Whoami { client }) => users::whoami(&client).await,
        RuntimeCommand::Node(NodeCommand::Remove { name, client }) => {
            client::remove_node(&client, &name.concat()).await
        }
        RuntimeCommand::Node(NodeCommand::Drain {
            name,
            reason,
            client,
        }) => {
            let reason = reason.as_deref().unwrap_or_default();
            client::drain_node(&client, &name.concat(), true, reason).await
        }
        RuntimeCommand::Node(NodeCommand::Stop {
            name,
            drain,
            client,
        }) => client::stop_node(&client, &name.concat(), drain).await,
        RuntimeCommand::Node(NodeCommand::Resume { name, client }) => {
            client::drain_node(&client, &name.concat(), false, "").await
        }
        RuntimeCommand::Log {
            job,
            task,
            all,
            state,
            header,
            stderr,
            attempt,
            follow,
            client,
        } => {
            let job = job.resolve(&client).await?;
            match task {
                Some(task) if !all => log::log(&client, job, &task, stderr, attempt, follow).await,
                _ => log::log_all(&client, job, stderr, state, header).await,
            }
        }
        RuntimeCommand::Purge(a) => purge::run(&a).await,
        RuntimeCommand::Usage {
            since,
            until,
            by_day,
            client,
        } => usage::usage(&client, since, until, by_day).await,
        RuntimeCommand::Demo(a) => demo::run(a).await,
        RuntimeCommand::Kernel(_)
        | RuntimeCommand::Matrows(_)
        | RuntimeCommand::BenchDispatch(_) => Ok(()),
    }
}

/// The job ids a list of `--after`-style references names (`name:NAME`: every job of that name).
async fn resolve_jobs(jobs: Vec<JobRef>, client: &ClientArgs) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::with_capacity(jobs.len());
    for job in jobs {
        ids.extend(job.resolve_all(client).await?);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::{parse_memory, parse_time_limit};

    #[test]
    fn an_updated_time_limit_reads_as_a_job_files_and_none_or_zero_is_no_limit() {
        assert_eq!(parse_time_limit("90s"), Ok(90_000));
        assert_eq!(parse_time_limit("1h30m"), Ok(5_400_000));
        assert_eq!(parse_time_limit("none"), Ok(0));
        assert_eq!(parse_time_limit("0"), Ok(0));
        assert_eq!(parse_time_limit("0s"), Ok(0));
        // Under a millisecond is still a limit, not none.
        assert_eq!(parse_time_limit("10us"), Ok(1));
        assert!(parse_time_limit("soon").is_err());
        assert!(parse_time_limit("87601h").is_err());
    }

    #[test]
    fn an_updated_memory_reads_as_a_job_files_and_none_or_zero_is_none() {
        assert_eq!(parse_memory("8GiB"), Ok(8 << 30));
        assert_eq!(parse_memory("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_memory("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_memory("none"), Ok(0));
        assert_eq!(parse_memory("0"), Ok(0));
        let e = parse_memory("lots").expect_err("not a size");
        assert!(e.starts_with("it is not a size such as 512MiB"), "{e}");
        assert!(e.ends_with("nor `none` for none declared"), "{e}");
        let e = super::parse_max_memory("8 gigs").expect_err("not a size");
        assert!(e.ends_with("nor `none` for no cap"), "{e}");
        // Neither the value (clap names it) nor the crate's own words.
        assert!(!e.contains("gigs") && !e.contains("SI unit"), "{e}");
    }

    /// `update --memory` reads a size as submission does: a fraction of a byte is refused, not
    /// read as none; a size past 16 EiB is refused as such, not saturated; and a figure under
    /// 1 MiB (a bare number meant as Slurm's megabytes) is refused saying it is bytes.
    #[test]
    fn an_updated_memory_is_refused_where_a_submitted_one_is() {
        let e = parse_memory("0.1B").expect_err("below a byte");
        assert!(e.contains("below 1 byte"), "{e}");
        let e = parse_memory("99999PiB").expect_err("past 16 EiB");
        assert!(e.contains("over 16 EiB"), "{e}");
        let e = parse_memory("4000").expect_err("4000 bytes");
        assert!(
            e.starts_with("4000 bytes is less than any process holds") && e.contains("4000MiB"),
            "{e}"
        );
        assert_eq!(parse_memory("1MiB"), Ok(1 << 20));
        // A cap on a user's memory is not a task's: no floor.
        assert_eq!(super::parse_max_memory("1000"), Ok(1000));
    }
}
