//! Workload and job files (TOML): applications of independent tasks, each with a CPU and/or GPU
//! variant, its base profile (for the simulator and the policies) and, for the runtime, the
//! command each task runs. See `examples/workload-knn-nb-bp.toml` and `examples/job-*.toml`.
//!
//! Parsing checks what one file can tell ([`parse_workload`]); [`Workload::check_runnable`] checks
//! a workload against the nodes it will run on (a GPU-only application on a cluster without GPUs,
//! a task larger than every node).
//!
//! A simulator workload may also give its users' fair-share shares and caps (`[[user]]`,
//! [`UserSpec`]); the runtime refuses them ([`Workload::check_commands`]): there an admin sets
//! them with `hetsched user add|limit`.

use super::cluster::at;
use super::units::Duration;
use super::{InputError, Source};
use crate::model::application::AcceleratorNeed;
use crate::model::user::MAX_SHARES;
use crate::model::{
    AppId, Application, CpuVariant, GpuVariant, Node, Resources, UserLimits, Variant,
};
use crate::time::Time;
use bytesize::ByteSize;
use serde::{Deserialize, Serialize};
use serde_spanned::Spanned;
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkloadFile {
    /// The job's name (runtime job files; shown instead of the file's path).
    #[serde(default)]
    name: Option<Spanned<String>>,
    #[serde(default)]
    application: Vec<ApplicationSpec>,
    /// Divisible loads (`[[divisible]]`, see [`super::divisible`]).
    #[serde(default)]
    divisible: Vec<super::divisible::DivisibleSpec>,
    /// Users' shares and caps (`[[user]]`, simulator only).
    #[serde(default)]
    user: Vec<UserSpec>,
}

/// A user's fair-share shares and caps as written (`[[user]]`, simulator workloads only): what
/// the runtime's `hetsched user add|limit` sets, so a user can try them in the simulator first.
/// A user that no `[[user]]` names has 1 share and no caps; one that no application names is
/// allowed and changes nothing.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    /// The user, as applications name it in `user`.
    pub name: Spanned<String>,
    /// Fair-share shares, 1 to [`MAX_SHARES`] (default 1; Slurm's `Shares`): under fair share
    /// (`--fair-share`) its usage is divided by them.
    #[serde(default)]
    pub shares: Option<Spanned<u32>>,
    /// The most cores its running tasks hold at once (Slurm's `MaxTRESPerUser=cpu=N`); absent:
    /// no cap.
    #[serde(default)]
    pub max_cores: Option<Spanned<u32>>,
    /// The most memory its running tasks hold at once, as the tasks declare it (`"64GiB"`, the
    /// syntax of a variant's `memory`); absent: no cap.
    #[serde(default, deserialize_with = "super::units::spanned_byte_size")]
    pub max_memory: Option<Spanned<ByteSize>>,
    /// The most GPUs its running tasks hold at once; absent: no cap.
    #[serde(default)]
    pub max_gpus: Option<Spanned<u32>>,
}

impl UserSpec {
    /// Its shares and caps for the model (0 in a dimension of the cap: none).
    pub fn limits(&self) -> UserLimits {
        UserLimits {
            name: self.name.get_ref().clone(),
            shares: self.shares.as_ref().map_or(1, |s| *s.get_ref()),
            cap: Resources::new(
                self.max_cores.as_ref().map_or(0, |c| *c.get_ref()),
                self.max_memory.as_ref().map_or(0, |m| m.get_ref().as_u64()),
                self.max_gpus.as_ref().map_or(0, |g| *g.get_ref()),
            ),
        }
    }
}

/// Whether `name` is a user name as the runtime's: 1 to 32 characters of `[a-z0-9._-]`, starting
/// with a letter.
fn is_user_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// What a bad user name is told.
const USER_NAME_RULE: &str =
    "a user name is 1 to 32 characters of a-z, 0-9, `.`, `_`, `-`, starting with a letter";

/// An application as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationSpec {
    /// Unique name within the file.
    pub name: Spanned<String>,
    /// Number of tasks (may be left out with `entries` or `indices`: one task per entry or
    /// index).
    #[serde(default)]
    pub tasks: Option<Spanned<u32>>,
    /// The tasks' indices (runtime, `hetsched submit --array`), HyperQueue's and Slurm's array
    /// syntax: `"1-100"`, `"0-99:10,500"` — comma-separated `N`, `A-B` (inclusive) or `A-B:STEP`,
    /// each index once. `{index}` and `$HETSCHED_TASK_INDEX` are the task's index from this list
    /// (without it: 0 to tasks − 1).
    #[serde(default)]
    pub indices: Option<Spanned<String>>,
    /// One task per entry (runtime, `hetsched submit --each-line FILE`): `{entry}` in the command
    /// becomes the task's entry (also in `$HETSCHED_ENTRY`). Each entry at most
    /// [`MAX_ENTRY_BYTES`], without NUL.
    #[serde(default)]
    pub entries: Option<Spanned<Vec<String>>>,
    /// Input split size V of each task, e.g. `"1GiB"` (0 when tasks read nothing); at most
    /// [`MAX_SPLIT`].
    #[serde(default, deserialize_with = "split_size")]
    pub split: ByteSize,
    /// Priority: higher levels are served first.
    #[serde(default)]
    pub priority: i32,
    /// When the application is submitted, relative to the start (simulator only).
    #[serde(default)]
    pub submit_at: Duration,
    /// How many times a task that fails (non-zero exit, failure to start, time limit) runs again
    /// (runtime; at most [`MAX_RETRIES`]). The simulator's tasks do not fail.
    #[serde(default = "zero")]
    pub retries: Spanned<u32>,
    /// The most of its tasks that may run at once, wherever they run (Slurm's array throttle,
    /// `--array=0-99%4`); absent: no limit. At least 1.
    #[serde(default)]
    pub max_running: Option<Spanned<u32>>,
    /// Whether a task needs an accelerator (spec 01): `"required"`, `"preferred"` or `"none"` (the
    /// default: today's behaviour). A required or preferred task needs a GPU variant, whose profile
    /// is the accelerator's time; the offload model (`hetsched_sim::accel`) reads the field; the
    /// runtime's placement and the batch simulator (`hetsched sim run`, `sim compare`) apply it
    /// the same way, through the scheduler's view (`SchedulerView::set_accelerator_need`), so a
    /// required application's tasks run only on GPUs under every policy (and the cpu-only policy
    /// cannot run it).
    #[serde(default)]
    pub accelerator: Option<Spanned<AcceleratorNeed>>,
    /// Files each task reads (runtime, spec 01): paths relative to the task's directory,
    /// `{index}` = the task's index. A task offloaded from an NNode ships them to its ANode.
    #[serde(default)]
    pub inputs: Vec<Spanned<String>>,
    /// Files each task writes, as `inputs`: an offloaded task's are shipped back to the NNode.
    #[serde(default)]
    pub outputs: Vec<Spanned<String>>,
    /// Whole nodes each task holds (runtime; HyperQueue's `--nodes`, Slurm's `--nodes`): absent
    /// or 1, an ordinary task; 2 to [`MAX_NODES_PER_TASK`], a multi-node task that holds every
    /// resource of each of its nodes and runs its command on the first of them with
    /// `HETSCHED_NODE_FILE` (one host name per line) for an MPI launcher to reach the others.
    /// It has only a CPU variant, without `cores` or `memory`.
    #[serde(default)]
    pub nodes: Option<Spanned<u32>>,
    /// Node attributes every task needs (`requires = ["bigmem"]`): its tasks run only on nodes
    /// whose `attributes` (cluster file, agent configuration) include them all; `gpu` is every
    /// node with accelerators. Slurm's `--constraint`.
    #[serde(default)]
    pub requires: Vec<Spanned<String>>,
    /// The CPU variant.
    pub cpu: Option<Spanned<CpuSpec>>,
    /// The GPU variant.
    pub gpu: Option<Spanned<GpuSpec>>,
    /// Directory the application's tasks run in on the nodes (runtime; absolute, or relative to
    /// the submitter's working directory). Default: the submitter's working directory if it
    /// exists on the node, else the agent's work directory.
    #[serde(default)]
    pub workdir: Option<Spanned<String>>,
    /// Where each task's stdout goes (runtime), instead of its agent's capture file: a path
    /// template with `{job}`, `{app}`, `{index}`, `{task}` and `{attempt}` (relative paths from
    /// the task's working directory; missing directories are created), or `"none"` to discard
    /// it. See [`super::output_path`].
    #[serde(default)]
    pub stdout: Option<Spanned<String>>,
    /// Where each task's stderr goes, as `stdout`; the same path as `stdout` puts both streams
    /// in one file.
    #[serde(default)]
    pub stderr: Option<Spanned<String>>,
    /// Bind each task's processes to CPUs of its own, as many as the cores it holds (runtime;
    /// HyperQueue's `--pin`): the agent gives them out and sets `HETSCHED_CPUS` and
    /// `OMP_NUM_THREADS`. The simulator's cores are its own.
    #[serde(default)]
    pub pin: bool,
    /// Who submits it (simulator only: fair share and per-user reports; 1 to 32 characters of
    /// `[a-z0-9._-]` starting with a letter, as the runtime's user names). The runtime refuses
    /// it: a runtime job belongs to the user its token names.
    #[serde(default)]
    pub user: Option<Spanned<String>>,
}

impl ApplicationSpec {
    /// The attributes it `requires`, sorted and without repeats.
    pub fn requires(&self) -> Vec<String> {
        let mut r: Vec<String> = self.requires.iter().map(|r| r.get_ref().clone()).collect();
        r.sort();
        r.dedup();
        r
    }
}

/// What a task runs: a shell line (run with `sh -c`) or an argument vector (run directly).
/// `{index}` in either is replaced by the task's index within its application.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Command {
    /// `command = "solve --n 2000"`.
    Shell(String),
    /// `command = ["solve", "--n", "2000"]`.
    Argv(Vec<String>),
}

/// Read by hand, not as an untagged enum: serde's words for an untagged mismatch ("data did not
/// match any variant of untagged enum Command") tell a user nothing; these say what a command
/// is and which element is not a string.
impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Command;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a command: a string (run with `sh -c`) or an array of strings")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Command, E> {
                Ok(Command::Shell(s.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Command, E> {
                Ok(Command::Shell(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Command, A::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Element {
                    Text(String),
                    Other(serde::de::IgnoredAny),
                }
                let mut argv = Vec::new();
                while let Some(e) = seq.next_element::<Element>()? {
                    match e {
                        Element::Text(s) => argv.push(s),
                        Element::Other(_) => {
                            return Err(serde::de::Error::custom(format!(
                                "element {} of the array is not a string: a command is a \
                                 string (run with `sh -c`) or an array of strings (quote \
                                 numbers: [\"sleep\", \"3\"])",
                                argv.len()
                            )));
                        }
                    }
                }
                Ok(Command::Argv(argv))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Command {
    /// Whether the command runs nothing: a blank shell line, or an argv whose program is blank.
    pub fn is_blank(&self) -> bool {
        match self {
            Command::Shell(s) => s.trim().is_empty(),
            Command::Argv(v) => v.first().is_none_or(|p| p.trim().is_empty()),
        }
    }
}

/// The CPU variant as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    /// `tpc0`: compute time of the CPU_base task (one core of speed 1.0, run alone).
    pub compute: Option<Duration>,
    /// `tdc0`: read time of the CPU_base task run alone.
    pub read: Option<Duration>,
    /// Cores one task holds.
    #[serde(default = "one")]
    pub cores: Spanned<u32>,
    /// Memory one task holds.
    #[serde(default, deserialize_with = "super::units::byte_size")]
    pub memory: ByteSize,
    /// Command (runtime).
    pub command: Option<Command>,
    /// Extra environment variables (runtime).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit of one task (runtime).
    pub time_limit: Option<Duration>,
    /// A stopped task's time between SIGTERM and SIGKILL (runtime; default: its agent's
    /// `kill_grace`; at most [`MAX_KILL_GRACE`](super::limits::MAX_KILL_GRACE)).
    pub kill_grace: Option<Duration>,
    /// A signal its processes get that long before its time limit, to save their state
    /// (runtime; `"USR1@2m"`, Slurm's `--signal`).
    pub signal: Option<super::units::WarnSignal>,
}

/// The GPU variant as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// `tpg0`: kernel time of the GPU_base task (one device of speed 1.0, run alone).
    pub compute: Option<Duration>,
    /// `tdcg`: host↔device copy time.
    pub copy: Option<Duration>,
    /// `tdg0`: read time of the GPU_base task run alone.
    pub read: Option<Duration>,
    /// Devices one task holds.
    #[serde(default = "one")]
    pub gpus: Spanned<u32>,
    /// Cores one task holds (a core drives the device).
    #[serde(default = "one")]
    pub cores: Spanned<u32>,
    /// Memory one task holds.
    #[serde(default, deserialize_with = "super::units::byte_size")]
    pub memory: ByteSize,
    /// Accelerator kind required; any kind when absent.
    pub kind: Option<String>,
    /// Command (runtime).
    pub command: Option<Command>,
    /// Extra environment variables (runtime).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit of one task (runtime).
    pub time_limit: Option<Duration>,
    /// A stopped task's time between SIGTERM and SIGKILL (runtime; default: its agent's
    /// `kill_grace`; at most [`MAX_KILL_GRACE`](super::limits::MAX_KILL_GRACE)).
    pub kill_grace: Option<Duration>,
    /// A signal its processes get that long before its time limit, to save their state
    /// (runtime; `"USR1@2m"`, Slurm's `--signal`).
    pub signal: Option<super::units::WarnSignal>,
}

/// Most `inputs` (or `outputs`) one application may declare.
pub const MAX_TASK_FILES: usize = 64;

/// Checks a declared task file: a relative path of 1 to 4096 bytes that stays inside the task's
/// directory (no root, no `..`), so a job can name no file elsewhere on a node.
pub fn task_file(name: &str) -> Result<(), String> {
    use std::path::{Component, Path};
    if name.is_empty() || name.len() > 4096 || name.contains('\0') {
        return Err("must be a file path of 1 to 4096 bytes".into());
    }
    let p = Path::new(name);
    let inside = p
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && p.components().any(|c| matches!(c, Component::Normal(_)));
    if !inside {
        return Err(format!(
            "`{}` must be a relative path inside the task's directory (no leading `/`, no `..`)",
            crate::text::clip(name)
        ));
    }
    Ok(())
}

/// Most whole nodes one multi-node task may hold (`nodes`).
pub const MAX_NODES_PER_TASK: u32 = 1024;

/// Most `retries` one application may ask for.
pub const MAX_RETRIES: u32 = 100;

/// Most tasks one workload may hold in all, over its applications: the batch simulator keeps a
/// record of every task in memory (about 120 bytes each, so about 1.2 GB at this bound), and a
/// `tasks` of billions is a typo likelier than a workload. (A runtime job holds at most
/// [`MAX_JOB_TASKS`], fewer still.)
pub const MAX_WORKLOAD_TASKS: u64 = 10_000_000;

/// Most tasks one runtime job may hold (the server's `MAX_TASKS_PER_JOB`): [`parse_workload`],
/// the runtime's parser, refuses more with the runtime's words, not the simulator's.
pub const MAX_JOB_TASKS: u64 = 1_000_000;

/// Longest entry of an application's `entries` (one task's argument).
pub const MAX_ENTRY_BYTES: usize = 16 * 1024;

/// The largest input split of one task (1 TiB): with at most [`MAX_WORKLOAD_TASKS`] tasks, the
/// splits of every task of a workload together stay below `u64::MAX`, so no sum of the bytes
/// tasks read (a node's outstanding reads in the simulator) can overflow. A split near 16 EiB was
/// accepted, and two such tasks on one node overflowed the simulator's sum.
pub const MAX_SPLIT: u64 = 1 << 40;
const _: () = assert!(MAX_SPLIT.checked_mul(MAX_WORKLOAD_TASKS).is_some());

/// An application's `split`: a size ([`super::units::byte_size`]) of at most [`MAX_SPLIT`].
fn split_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
    let size = super::units::byte_size(d)?;
    if size.as_u64() > MAX_SPLIT {
        return Err(serde::de::Error::custom(format!(
            "is {} bytes; a task's split is at most {MAX_SPLIT} (1 TiB)",
            size.as_u64()
        )));
    }
    Ok(size)
}

impl ApplicationSpec {
    /// How many tasks it has: `tasks`, else one per entry, else one per index.
    pub fn task_count(&self) -> u32 {
        match (&self.tasks, &self.entries) {
            (Some(t), _) => *t.get_ref(),
            (None, Some(e)) => u32::try_from(e.get_ref().len()).unwrap_or(u32::MAX),
            (None, None) => self
                .indices()
                .map_or(0, |i| u32::try_from(i.len()).unwrap_or(u32::MAX)),
        }
    }

    /// Its tasks' indices in task order: `indices` as parsed (checked by [`parse_workload`]),
    /// or `None` for 0 to tasks − 1.
    pub fn indices(&self) -> Option<Vec<u32>> {
        self.indices
            .as_ref()
            .and_then(|i| parse_indices(i.get_ref()).ok())
    }

    /// Task `index`'s entry, if the application has entries.
    pub fn entry(&self, index: u32) -> Option<&str> {
        self.entries
            .as_ref()
            .and_then(|e| e.get_ref().get(index as usize))
            .map(String::as_str)
    }
}

/// Most indices one application's `indices` may list (the server's cap on a job's tasks).
pub const MAX_INDICES: usize = 1_000_000;

/// Parses an index list (`indices`, `submit --array`): comma-separated `N`, `A-B` (inclusive)
/// or `A-B:STEP`, in the order written, each index once, at most [`MAX_INDICES`].
pub fn parse_indices(text: &str) -> Result<Vec<u32>, String> {
    let number = |s: &str, item: &str| -> Result<u32, String> {
        s.trim().parse::<u32>().map_err(|_| {
            format!(
                "`{}`: expected an index N, a range A-B or A-B:STEP (indices 0 to {})",
                crate::text::clip(item),
                u32::MAX
            )
        })
    };
    let mut out = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err("an empty item (two commas, or one at an end)".into());
        }
        let (range, step) = match item.split_once(':') {
            Some((r, s)) => (r, number(s, item)?),
            None => (item, 1),
        };
        if step == 0 {
            return Err(format!(
                "`{}`: the step must be at least 1",
                crate::text::clip(item)
            ));
        }
        let (first, last) = match range.split_once('-') {
            Some((a, b)) => (number(a, item)?, number(b, item)?),
            None if step != 1 => {
                return Err(format!(
                    "`{}`: a step needs a range A-B:STEP",
                    crate::text::clip(item)
                ));
            }
            None => {
                let n = number(range, item)?;
                (n, n)
            }
        };
        if last < first {
            return Err(format!(
                "`{}`: the range ends before it starts",
                crate::text::clip(item)
            ));
        }
        let count = ((last - first) / step) as usize + 1;
        if out.len() + count > MAX_INDICES {
            return Err(format!("more than {MAX_INDICES} indices"));
        }
        out.extend((first..=last).step_by(step as usize));
    }
    let mut sorted = out.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("index {} is listed twice", w[0]));
    }
    Ok(out)
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

fn zero() -> Spanned<u32> {
    Spanned::new(0..0, 0)
}

impl CpuSpec {
    /// Resources one task holds.
    pub fn request(&self) -> Resources {
        Resources::new(*self.cores.get_ref(), self.memory.as_u64(), 0)
    }
}

impl GpuSpec {
    /// Resources one task holds.
    pub fn request(&self) -> Resources {
        Resources::new(
            *self.cores.get_ref(),
            self.memory.as_u64(),
            *self.gpus.get_ref(),
        )
    }
}

/// What to do when a variant has no profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MissingProfile {
    /// Refuse: the simulator needs every profile, and one that takes time (a variant whose
    /// compute, copy and read are all 0 is refused too); and it refuses a `[[divisible]]` load,
    /// which it does not simulate ([`Workload::check_no_divisible`]).
    Refuse,
    /// Use this compute-time estimate and zero read/copy times until better is known (the runtime
    /// learns profiles from finished tasks).
    Estimate(Time),
}

/// Longest job name (`name =`).
pub const MAX_JOB_NAME: usize = 256;

/// A parsed workload: its applications as written, and the text, so later checks can still point
/// at the line that is wrong.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Where the text came from.
    pub origin: String,
    /// The text.
    pub text: String,
    /// Applications in file order (= submission order).
    pub applications: Vec<ApplicationSpec>,
    /// The job's name (`name =` at the top of a job file), if given.
    pub name: Option<String>,
    /// Divisible loads (`[[divisible]]`), in file order.
    pub divisible: Vec<super::divisible::DivisibleSpec>,
    /// Users' shares and caps (`[[user]]`, simulator only), in file order, each name once.
    pub users: Vec<UserSpec>,
}

/// Fields of a variant (`[application.cpu]` / `[application.gpu]`) that are easy to write on the
/// application itself.
const VARIANT_FIELDS: [&str; 9] = [
    "command",
    "env",
    "cores",
    "memory",
    "gpus",
    "time_limit",
    "kill_grace",
    "signal",
    "compute",
];

/// An unknown field that belongs to a variant, written on the application, gets told where it goes.
fn variant_field_hint(mut e: InputError) -> InputError {
    let misplaced = e.field.as_deref().and_then(|f| {
        let (app, name) = f.rsplit_once('.')?;
        let is_app = app.starts_with("application[") && !app.contains('.');
        (is_app && VARIANT_FIELDS.contains(&name)).then(|| name.to_string())
    });
    if let Some(name) = misplaced {
        e.message = format!(
            "`{name}` belongs to a variant of the application: write it under \
             [application.cpu] (or [application.gpu]), e.g.\n  [application.cpu]\n  {name} = …"
        );
    }
    e
}

/// The whole-number fields whose range the checks below narrow from their type's (0 refused, a
/// lower maximum): a value of the wrong type or size is told this range, not one they then
/// refuse part of.
const WORKLOAD_RANGES: &[(&str, u64, u64)] = &[
    ("application.tasks", 1, MAX_WORKLOAD_TASKS),
    ("application.retries", 0, MAX_RETRIES as u64),
    ("application.max_running", 1, u32::MAX as u64),
    ("application.cpu.cores", 1, u32::MAX as u64),
    ("application.gpu.gpus", 1, u32::MAX as u64),
    ("application.gpu.cores", 1, u32::MAX as u64),
    ("user.shares", 1, MAX_SHARES as u64),
    ("user.max_cores", 1, u32::MAX as u64),
    ("user.max_gpus", 1, u32::MAX as u64),
];

/// Parses a workload or job file and checks everything the file alone can tell.
pub fn parse_workload(origin: &str, text: &str) -> Result<Workload, InputError> {
    parse_any_workload(origin, text, true)
}

/// [`parse_workload`] for the simulators of applications (`sim run`, `sim compare`, `sim
/// accel`), which refuse `[[divisible]]` loads ([`Workload::check_no_divisible`]): a file with
/// none of either is told to add an application only, not a load they would refuse next.
pub fn parse_sim_workload(origin: &str, text: &str) -> Result<Workload, InputError> {
    parse_any_workload(origin, text, false)
}

fn parse_any_workload(
    origin: &str,
    text: &str,
    takes_divisible: bool,
) -> Result<Workload, InputError> {
    let src = Source::new(origin, text);
    let file: WorkloadFile = src
        .parse_toml()
        .map_err(|e| super::whole_number_range(variant_field_hint(e), WORKLOAD_RANGES))?;
    if file.application.is_empty() && file.divisible.is_empty() {
        return Err(src.error(
            None,
            Some("application".into()),
            if takes_divisible {
                "no applications: add at least one [[application]] table (or a [[divisible]] load)"
            } else {
                "no applications: add at least one [[application]] table (divisible loads run \
                 with `hetsched sim divisible`)"
            },
        ));
    }
    for (i, d) in file.divisible.iter().enumerate() {
        super::divisible::check(&src, i, d)?;
    }
    let mut names = HashSet::new();
    let mut total_tasks = 0u64;
    for (i, a) in file.application.iter().enumerate() {
        let field = |f: &str| Some(format!("application[{i}].{f}"));
        let name = a.name.get_ref();
        if name.trim().is_empty() {
            return Err(src.error(at(&a.name), field("name"), "must not be empty"));
        }
        // The runtime's rule (its task outputs are named after the application), for the
        // simulator too: its tables print the name as written.
        if let Some(problem) = super::limits::app_name_problem(name) {
            return Err(src.error(at(&a.name), field("name"), problem));
        }
        if let Some(w) = &a.workdir {
            let d = w.get_ref();
            if d.is_empty() || d.len() > 4096 || d.contains('\0') {
                return Err(src.error(
                    at(w),
                    field("workdir"),
                    "must be a directory path of 1 to 4096 bytes",
                ));
            }
        }
        for (stream, what) in [(&a.stdout, "stdout"), (&a.stderr, "stderr")] {
            if let Some(t) = stream
                && let Err(e) = super::output_path::check(t.get_ref())
            {
                return Err(src.error(at(t), field(what), e));
            }
        }
        for (list, what) in [(&a.inputs, "inputs"), (&a.outputs, "outputs")] {
            if list.len() > MAX_TASK_FILES {
                return Err(src.error(
                    list.first().and_then(at),
                    field(what),
                    format!("at most {MAX_TASK_FILES} files"),
                ));
            }
            for (k, f) in list.iter().enumerate() {
                if let Err(e) = task_file(f.get_ref()) {
                    return Err(src.error(at(f), field(&format!("{what}[{k}]")), e));
                }
            }
        }
        if !names.insert(name.clone()) {
            return Err(src.error(
                at(&a.name),
                field("name"),
                format!(
                    "application `{}` is declared twice",
                    crate::text::clip(name)
                ),
            ));
        }
        let indices = match &a.indices {
            Some(i) => Some(
                parse_indices(i.get_ref()).map_err(|e| src.error(at(i), field("indices"), e))?,
            ),
            None => None,
        };
        if let (Some(list), Some(i)) = (&indices, &a.indices) {
            let other = match (&a.tasks, &a.entries) {
                (Some(t), _) => Some(("`tasks` is", *t.get_ref() as usize)),
                (None, Some(e)) => Some(("`entries` holds", e.get_ref().len())),
                (None, None) => None,
            };
            if let Some((what, n)) = other
                && n != list.len()
            {
                return Err(src.error(
                    at(i),
                    field("indices"),
                    format!(
                        "lists {} indices but {what} {n} (one task per index)",
                        list.len()
                    ),
                ));
            }
        }
        match (&a.tasks, &a.entries) {
            (None, None) if indices.is_none() => {
                return Err(src.error(
                    at(&a.name),
                    field("tasks"),
                    "missing: give `tasks` (how many) or `entries` (one task per entry), or `indices` (one task per index)",
                ));
            }
            (Some(t), _) if *t.get_ref() == 0 => {
                return Err(src.error(at(t), field("tasks"), "must be at least 1"));
            }
            (_, Some(e)) if e.get_ref().is_empty() => {
                return Err(src.error(at(e), field("entries"), "must hold at least one entry"));
            }
            (Some(t), Some(e)) if *t.get_ref() as usize != e.get_ref().len() => {
                return Err(src.error(
                    at(t),
                    field("tasks"),
                    format!(
                        "is {} but `entries` holds {} (one task per entry; leave `tasks` out)",
                        t.get_ref(),
                        e.get_ref().len()
                    ),
                ));
            }
            _ => {}
        }
        total_tasks += u64::from(a.task_count());
        // The runtime's job (the parser that takes divisible loads) holds fewer tasks than a
        // simulated workload: say its bound, not the simulator's.
        let most = if takes_divisible {
            MAX_JOB_TASKS
        } else {
            MAX_WORKLOAD_TASKS
        };
        if total_tasks > most {
            let (span, what) = match (&a.tasks, &a.entries, &a.indices) {
                (Some(t), _, _) => (at(t), "tasks"),
                (None, Some(e), _) => (at(e), "entries"),
                (None, None, Some(x)) => (at(x), "indices"),
                (None, None, None) => (at(&a.name), "tasks"),
            };
            let why = if takes_divisible {
                format!(
                    "{} tasks bring the job to {total_tasks}: at most {most} per job",
                    a.task_count()
                )
            } else {
                format!(
                    "{} tasks bring the workload to {total_tasks}: at most {most} tasks in all \
                     (the simulator holds every task in memory)",
                    a.task_count()
                )
            };
            return Err(src.error(span, field(what), why));
        }
        if let Some(e) = &a.entries {
            for (k, entry) in e.get_ref().iter().enumerate() {
                if entry.len() > MAX_ENTRY_BYTES || entry.contains('\0') {
                    return Err(src.error(
                        at(e),
                        field(&format!("entries[{k}]")),
                        format!("an entry is at most {MAX_ENTRY_BYTES} bytes, without NUL"),
                    ));
                }
            }
        }
        if *a.retries.get_ref() > MAX_RETRIES {
            return Err(src.error(
                at(&a.retries),
                field("retries"),
                format!("must be at most {MAX_RETRIES}"),
            ));
        }
        super::cluster::requirement_list(&src, &a.requires, &format!("application[{i}].requires"))?;
        if let Some(m) = &a.max_running
            && *m.get_ref() == 0
        {
            return Err(src.error(
                at(m),
                field("max_running"),
                "must be at least 1 (leave it out for no limit)",
            ));
        }
        if let Some(n) = &a.nodes {
            multi_node(&src, a, n, &field)?;
        }
        if let Some(u) = &a.user
            && !is_user_name(u.get_ref())
        {
            return Err(src.error(at(u), field("user"), USER_NAME_RULE));
        }
        if a.cpu.is_none() && a.gpu.is_none() {
            return Err(src.error(
                at(&a.name),
                Some(format!("application[{i}]")),
                format!("application `{}` has neither a [application.cpu] nor a [application.gpu] variant", crate::text::clip(name)),
            ));
        }
        if let Some(need) = &a.accelerator
            && *need.get_ref() != AcceleratorNeed::None
            && a.gpu.is_none()
        {
            return Err(src.error(
                at(need),
                field("accelerator"),
                format!(
                    "application `{name}` is `{}` but has no [application.gpu] variant to give the accelerator's time",
                    need.get_ref().as_str()
                ),
            ));
        }
        if let Some(cpu) = &a.cpu
            && *cpu.get_ref().cores.get_ref() == 0
        {
            return Err(src.error(
                at(&cpu.get_ref().cores),
                field("cpu.cores"),
                "must be at least 1",
            ));
        }
        if let Some(gpu) = &a.gpu
            && *gpu.get_ref().gpus.get_ref() == 0
        {
            return Err(src.error(
                at(&gpu.get_ref().gpus),
                field("gpu.gpus"),
                "must be at least 1",
            ));
        }
        // A core drives the device: a GPU task holding none would run beside a full node's CPU
        // tasks, as a CPU task of 0 cores would (refused above).
        if let Some(gpu) = &a.gpu
            && *gpu.get_ref().cores.get_ref() == 0
        {
            return Err(src.error(
                at(&gpu.get_ref().cores),
                field("gpu.cores"),
                "must be at least 1",
            ));
        }
    }
    let name = match &file.name {
        Some(n) => {
            let v = n.get_ref();
            if v.trim().is_empty() || v.len() > MAX_JOB_NAME || v.chars().any(char::is_control) {
                return Err(src.error(
                    at(n),
                    Some("name".into()),
                    format!(
                        "a job name must be 1 to {MAX_JOB_NAME} bytes without control characters"
                    ),
                ));
            }
            if let Some(problem) = crate::text::hidden_problem(v) {
                return Err(src.error(at(n), Some("name".into()), problem));
            }
            Some(v.clone())
        }
        None => None,
    };
    check_users(&src, &file.user)?;
    Ok(Workload {
        origin: origin.to_string(),
        text: text.to_string(),
        applications: file.application,
        name,
        divisible: file.divisible,
        users: file.user,
    })
}

/// Checks the `[[user]]` tables: user names, each named once, shares 1 to [`MAX_SHARES`], and
/// no cap of 0 (which would read as "nothing may run", while the runtime reads 0 as no cap).
fn check_users(src: &Source<'_>, users: &[UserSpec]) -> Result<(), InputError> {
    let mut names = HashSet::new();
    for (i, u) in users.iter().enumerate() {
        let field = |f: &str| Some(format!("user[{i}].{f}"));
        let name = u.name.get_ref();
        if !is_user_name(name) {
            return Err(src.error(at(&u.name), field("name"), USER_NAME_RULE));
        }
        if !names.insert(name.as_str()) {
            return Err(src.error(
                at(&u.name),
                field("name"),
                format!(
                    "user `{}` has two [[user]] tables: give its shares and caps in one",
                    crate::text::clip(name)
                ),
            ));
        }
        if let Some(s) = &u.shares
            && !(1..=MAX_SHARES).contains(s.get_ref())
        {
            return Err(src.error(
                at(s),
                field("shares"),
                format!("must be 1 to {MAX_SHARES} (default 1)"),
            ));
        }
        let zero_caps = [
            (
                "max_cores",
                u.max_cores.as_ref().and_then(|c| zero_at(c, 0)),
            ),
            (
                "max_memory",
                u.max_memory.as_ref().and_then(|m| zero_at(m, ByteSize(0))),
            ),
            ("max_gpus", u.max_gpus.as_ref().and_then(|g| zero_at(g, 0))),
        ];
        if let Some((cap, span)) = zero_caps
            .into_iter()
            .find_map(|(cap, zero)| zero.map(|span| (cap, span)))
        {
            return Err(src.error(
                span,
                field(cap),
                "a cap of 0 lets nothing run: omit it for no cap",
            ));
        }
    }
    Ok(())
}

/// Whether some node of `nodes` holds one task of `a`'s CPU variant, and of its GPU variant (its
/// cores, memory, and as many GPUs of its kind); `None` for a variant it has not, or never runs
/// (the CPU variant of an application that requires an accelerator).
fn variants_fit(a: &ApplicationSpec, nodes: &[&Node]) -> (Option<bool>, Option<bool>) {
    let required = a.accelerator_need() == AcceleratorNeed::Required;
    let cpu = a.cpu.as_ref().filter(|_| !required).map(|c| {
        nodes
            .iter()
            .any(|n| n.capacity().fits(&c.get_ref().request()))
    });
    let gpu = a.gpu.as_ref().map(|g| {
        let g = g.get_ref();
        nodes.iter().any(|n| {
            let devices = n
                .accelerators
                .iter()
                .filter(|acc| g.kind.as_deref().is_none_or(|k| acc.kind == k))
                .count() as u32;
            n.capacity().fits(&g.request()) && devices >= *g.gpus.get_ref()
        })
    });
    (cpu, gpu)
}

/// What a task of CPU variant `c` asks beside the most any node of `nodes` offers of each:
/// `64 cores; the largest nodes offer 4 cores, 16.0 GiB`.
fn cpu_shortfall(c: &CpuSpec, nodes: &[&Node]) -> String {
    let asked = c.request();
    let cores = nodes.iter().map(|n| n.capacity().cores).max().unwrap_or(0);
    let memory = nodes
        .iter()
        .map(|n| n.capacity().memory_bytes)
        .max()
        .unwrap_or(0);
    // Memory only where the task asks for some: `0 B` read as an ask.
    let what = if asked.memory_bytes == 0 {
        crate::text::count(asked.cores, "core")
    } else {
        format!(
            "{}, {}",
            crate::text::count(asked.cores, "core"),
            bytesize::ByteSize(asked.memory_bytes)
        )
    };
    format!(
        "{what}; the largest nodes offer {}, {}",
        crate::text::count(cores, "core"),
        bytesize::ByteSize(memory)
    )
}

/// `Some(where it is written)` if `value` is `zero`.
fn zero_at<T: PartialEq>(value: &Spanned<T>, zero: T) -> Option<Option<usize>> {
    (*value.get_ref() == zero).then(|| at(value))
}

/// Checks an application's `nodes` (`n`): 1 to [`MAX_NODES_PER_TASK`]; beyond 1, a CPU variant
/// alone, holding whole nodes (no `cores`, `memory`, `pin`, offloaded files or accelerator).
fn multi_node(
    src: &Source<'_>,
    a: &ApplicationSpec,
    n: &Spanned<u32>,
    field: &dyn Fn(&str) -> Option<String>,
) -> Result<(), InputError> {
    let nodes = *n.get_ref();
    if nodes == 0 || nodes > MAX_NODES_PER_TASK {
        return Err(src.error(
            at(n),
            field("nodes"),
            format!("must be 1 to {MAX_NODES_PER_TASK}"),
        ));
    }
    if nodes == 1 {
        return Ok(());
    }
    let whole = "a multi-node task holds every core, all memory and every device of its nodes";
    if let Some(g) = &a.gpu {
        return Err(src.error(
            at(g),
            field("gpu"),
            format!("{whole}: give it only an [application.cpu] variant"),
        ));
    }
    if let Some(c) = &a.cpu {
        let c_ref = c.get_ref();
        if *c_ref.cores.get_ref() != 1 {
            return Err(src.error(
                at(&c_ref.cores),
                field("cpu.cores"),
                format!("{whole}: leave `cores` out"),
            ));
        }
        if c_ref.memory.as_u64() != 0 {
            return Err(src.error(
                at(c),
                field("cpu.memory"),
                format!("{whole}: leave `memory` out"),
            ));
        }
    }
    let refused = [
        ("pin", a.pin),
        ("inputs", !a.inputs.is_empty()),
        ("outputs", !a.outputs.is_empty()),
        ("accelerator", a.accelerator.is_some()),
    ];
    if let Some((name, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(src.error(
            at(n),
            field(name),
            format!("a multi-node task (`nodes = {nodes}`) cannot have `{name}`"),
        ));
    }
    Ok(())
}

impl Workload {
    fn source(&self) -> Source<'_> {
        Source::new(&self.origin, &self.text)
    }

    /// Total number of tasks.
    pub fn total_tasks(&self) -> u64 {
        self.applications
            .iter()
            .map(|a| u64::from(a.task_count()))
            .sum()
    }

    /// Refuses a workload with a `[[divisible]]` load, at its first one, for a simulator that
    /// simulates applications only (`simulator` names it: "the offload simulator (`sim
    /// accel`)"): the runtime runs such loads, and a simulator dropped them and reported an
    /// empty run.
    pub fn check_no_divisible(&self, simulator: &str) -> Result<(), InputError> {
        match self.divisible.first() {
            Some(d) => Err(self.source().error(
                at(&d.name),
                Some("divisible[0]".into()),
                format!(
                    "{simulator} does not simulate divisible loads: run them with `hetsched sim \
                     divisible`"
                ),
            )),
            None => Ok(()),
        }
    }

    /// The model's applications, with ids from `first_id` in file order. For the batch simulator
    /// ([`MissingProfile::Refuse`]), a `[[divisible]]` load is refused: it would be dropped.
    pub fn to_applications(
        &self,
        first_id: u32,
        missing: MissingProfile,
    ) -> Result<Vec<Application>, InputError> {
        let src = self.source();
        if missing == MissingProfile::Refuse {
            self.check_no_divisible("the batch simulator (`sim run`, `sim compare`)")?;
        }
        self.applications
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let need = |value: Option<Duration>, span: Option<usize>, f: &str| -> Result<Time, InputError> {
                    match (value, missing) {
                        (Some(d), _) => Ok(d.0),
                        (None, MissingProfile::Estimate(t)) => Ok(if f.ends_with("compute") { t } else { 0 }),
                        (None, MissingProfile::Refuse) => Err(src.error(
                            span,
                            Some(format!("application[{i}].{f}")),
                            "missing: the simulator needs the base profile (compute, read; and copy for GPU variants)",
                        )),
                    }
                };
                // The simulator times a task and its delay against this profile: one that takes
                // no time at all is a mistake (its delay would divide by zero).
                let no_time = |total: Time, span: Option<usize>, f: &str, parts: &str| -> Result<(), InputError> {
                    if total == 0 && missing == MissingProfile::Refuse {
                        return Err(src.error(
                            span,
                            Some(format!("application[{i}].{f}")),
                            format!("the base profile takes no time ({parts} are 0): the simulator needs a task that takes time"),
                        ));
                    }
                    Ok(())
                };
                // `read` is the time a task alone takes to read its `split` on the profiled disk
                // (spec 02's tdc0/tdg0); the simulator reads the split's bytes from the node's
                // disk, so a read time without a split is a read that never happens, while the
                // policies' predictions and the delay figures still counted it.
                let read_needs_split = |read: Option<Duration>, span: Option<usize>, f: &str| -> Result<(), InputError> {
                    match read {
                        Some(r) if r.0 > 0 && a.split.as_u64() == 0 && missing == MissingProfile::Refuse => Err(src.error(
                            span,
                            Some(format!("application[{i}].{f}")),
                            format!(
                                "read = \"{}\" but the application has no `split`: the simulator reads each \
                                 task's `split` bytes from its node's disk, and `read` is how long that \
                                 takes alone on the profiled disk; add the bytes a task reads (e.g. \
                                 split = \"1GiB\" for read = \"8s\" at 128 MiB/s), or write read = \"0s\" \
                                 if its tasks read nothing",
                                humantime::format_duration(std::time::Duration::from_nanos(r.0))
                            ),
                        )),
                        _ => Ok(()),
                    }
                };
                let cpu = match &a.cpu {
                    Some(c) => {
                        let (span, c) = (at(c), c.get_ref());
                        read_needs_split(c.read, span, "cpu.read")?;
                        let v = CpuVariant {
                            compute: need(c.compute, span, "cpu.compute")?,
                            read: need(c.read, span, "cpu.read")?,
                            request: c.request(),
                            time_limit: c.time_limit.map(|d| d.0),
                        };
                        no_time(v.compute.saturating_add(v.read), span, "cpu.compute", "compute and read")?;
                        Some(v)
                    }
                    None => None,
                };
                let gpu = match &a.gpu {
                    Some(g) => {
                        let (span, g) = (at(g), g.get_ref());
                        read_needs_split(g.read, span, "gpu.read")?;
                        let v = GpuVariant {
                            compute: need(g.compute, span, "gpu.compute")?,
                            copy: g.copy.map_or(Ok(0), |d| Ok::<_, InputError>(d.0))?,
                            read: need(g.read, span, "gpu.read")?,
                            request: g.request(),
                            kind: g.kind.clone(),
                            time_limit: g.time_limit.map(|d| d.0),
                        };
                        no_time(
                            v.compute.saturating_add(v.copy).saturating_add(v.read),
                            span,
                            "gpu.compute",
                            "compute, copy and read",
                        )?;
                        Some(v)
                    }
                    None => None,
                };
                Ok(Application {
                    id: AppId(first_id + i as u32),
                    name: a.name.get_ref().clone(),
                    priority: a.priority,
                    submit_time: a.submit_at.0,
                    split_bytes: a.split.as_u64(),
                    tasks: a.task_count(),
                    cpu,
                    gpu,
                    requires: a.requires(),
                    max_running: a.max_running.as_ref().map_or(0, |m| *m.get_ref()),
                    nodes: a.nodes.as_ref().map_or(1, |n| *n.get_ref()),
                    user: a.user.as_ref().map(|u| u.get_ref().clone()),
                })
            })
            .collect()
    }

    /// Refuses an exclusion `!node:NAME` (`submit --exclude NAME`) naming none of the nodes
    /// `known` (the names of the nodes the cluster knows, live or not): the same words as a
    /// `node:NAME` naming none. An empty `known` (no node registered yet) checks nothing.
    pub fn check_excluded_nodes(&self, known: &[String]) -> Result<(), InputError> {
        if known.is_empty() {
            return Ok(());
        }
        let src = self.source();
        for (i, d) in self.divisible.iter().enumerate() {
            let who = format!("divisible load `{}`", d.name.get_ref());
            let field = format!("divisible[{i}].requires");
            excluded_known(&src, known, &d.requires, &field, &who)?;
        }
        for (i, a) in self.applications.iter().enumerate() {
            let who = format!("application `{}`", a.name.get_ref());
            let field = format!("application[{i}].requires");
            excluded_known(&src, known, &a.requires, &field, &who)?;
        }
        Ok(())
    }

    /// Checks that every application can run somewhere on `nodes`: some node has the attributes
    /// it `requires`, and at least one of its variants fits on at least one such node (resources
    /// and accelerator kind); and that some node has the attributes each divisible load
    /// `requires`.
    pub fn check_runnable(&self, cluster: &[Node]) -> Result<(), InputError> {
        let src = self.source();
        for (i, d) in self.divisible.iter().enumerate() {
            let who = format!("divisible load `{}`", d.name.get_ref());
            nodes_with(
                &src,
                cluster,
                &d.requires,
                &format!("divisible[{i}].requires"),
                &who,
            )?;
        }
        for (i, a) in self.applications.iter().enumerate() {
            let who = format!("application `{}`", a.name.get_ref());
            let field = format!("application[{i}].requires");
            let nodes = nodes_with(&src, cluster, &a.requires, &field, &who)?;
            let attrs = a.requires();
            let whole = a.nodes.as_ref().map_or(1, |n| *n.get_ref());
            if whole > 1 {
                if nodes.len() >= whole as usize {
                    continue;
                }
                let among = if attrs.is_empty() {
                    String::new()
                } else {
                    format!(" with {}", attrs.join(" + "))
                };
                return Err(src.error(
                    a.nodes.as_ref().and_then(at),
                    Some(format!("application[{i}].nodes")),
                    format!(
                        "application `{}` needs {whole} whole nodes per task, and the cluster has {}{among}",
                        a.name.get_ref(),
                        crate::text::count(nodes.len() as u64, "node")
                    ),
                ));
            }
            // A task that requires an accelerator never runs its CPU variant.
            let required = a.accelerator_need() == AcceleratorNeed::Required;
            let (cpu_fits, gpu_fits) = variants_fit(a, &nodes);
            if cpu_fits == Some(true) || gpu_fits == Some(true) {
                continue;
            }
            let name = a.name.get_ref();
            let (span, field, message) = match (&a.cpu, &a.gpu) {
                (Some(c), _) if !required => (
                    at(c),
                    "cpu",
                    format!(
                        "application `{name}`: no node has the cores and memory one task asks \
                         for ({})",
                        cpu_shortfall(c.get_ref(), &nodes)
                    ),
                ),
                (_, Some(g)) => (
                    at(g),
                    "gpu",
                    match &g.get_ref().kind {
                        Some(k) => format!(
                            "application `{name}` runs only on GPUs of kind `{k}`, and no node has {} of them",
                            g.get_ref().gpus.get_ref()
                        ),
                        None => format!(
                            "application `{name}` runs only on GPUs, and no node has {} with the cores and memory it asks for",
                            crate::text::count(u64::from(*g.get_ref().gpus.get_ref()), "GPU")
                        ),
                    },
                ),
                (_, None) => (
                    at(&a.name),
                    "name",
                    format!("application `{name}` has no variant"),
                ),
            };
            let message = if attrs.is_empty() {
                message
            } else {
                format!("{message} among the nodes with {}", attrs.join(" + "))
            };
            return Err(src.error(span, Some(format!("application[{i}].{field}")), message));
        }
        Ok(())
    }

    /// The variants [`Workload::check_runnable`] lets pass although no node can hold a task of
    /// them, because the application's other variant fits somewhere: the simulator runs its
    /// tasks on that other variant only, so the one that never runs is said (as a warning, at
    /// the variant's table) rather than ignored in silence. An application `check_runnable`
    /// refuses gives none, and so does a variant the application never runs (the CPU variant of
    /// an application that `requires` an accelerator).
    pub fn unfit_variants(&self, cluster: &[Node]) -> Vec<InputError> {
        let src = self.source();
        let mut unfit = Vec::new();
        for (i, a) in self.applications.iter().enumerate() {
            let who = format!("application `{}`", a.name.get_ref());
            let Ok(nodes) = nodes_with(&src, cluster, &a.requires, "", &who) else {
                continue;
            };
            if a.nodes.as_ref().is_some_and(|n| *n.get_ref() > 1) {
                continue;
            }
            let among = if a.requires.is_empty() {
                String::new()
            } else {
                format!(" among the nodes with {}", a.requires().join(" + "))
            };
            let name = a.name.get_ref();
            match (variants_fit(a, &nodes), &a.cpu, &a.gpu) {
                ((Some(false), Some(true)), Some(c), _) => unfit.push(src.error(
                    at(c),
                    Some(format!("application[{i}].cpu")),
                    format!(
                        "application `{name}`: no node{among} has the cores and memory a task of \
                         its CPU variant asks for ({}): its tasks run on GPUs only",
                        cpu_shortfall(c.get_ref(), &nodes)
                    ),
                )),
                ((Some(true), Some(false)), _, Some(spanned)) => {
                    let g = spanned.get_ref();
                    let gpus = crate::text::count(u64::from(*g.gpus.get_ref()), "GPU");
                    let of_kind = g
                        .kind
                        .as_deref()
                        .map_or(String::new(), |k| format!(" of kind `{k}`"));
                    let most = nodes
                        .iter()
                        .map(|n| {
                            n.accelerators
                                .iter()
                                .filter(|acc| g.kind.as_deref().is_none_or(|k| acc.kind == k))
                                .count() as u64
                        })
                        .max()
                        .unwrap_or(0);
                    unfit.push(src.error(
                        at(spanned),
                        Some(format!("application[{i}].gpu")),
                        format!(
                            "application `{name}`: no node{among} has {gpus}{of_kind} with the \
                             cores and memory a task of its GPU variant asks for (the most on a \
                             node: {}): its tasks run on CPUs only",
                            crate::text::count(most, "GPU")
                        ),
                    ));
                }
                _ => {}
            }
        }
        unfit
    }

    /// Checks that every variant has a `command` that runs something (the runtime runs it; the
    /// simulator does not need one): an empty or blank shell command, or an argv without a
    /// program, is refused here rather than failing every task on its agent. A `user` (the
    /// simulator's) is refused too: a runtime job belongs to the user its token names; and so is
    /// a `[[user]]`: a job may not set its owner's shares or caps, an admin does.
    pub fn check_commands(&self) -> Result<(), InputError> {
        let src = self.source();
        if let Some(u) = self.users.first() {
            return Err(src.error(
                at(&u.name),
                Some("user[0]".into()),
                "user caps and shares in the runtime are set with `hetsched user add|limit` \
                 (by the admin): `[[user]]` is for simulator workloads",
            ));
        }
        for (i, a) in self.applications.iter().enumerate() {
            if let Some(u) = &a.user {
                return Err(src.error(
                    at(u),
                    Some(format!("application[{i}].user")),
                    "a runtime job belongs to the user its token names (`hetsched user \
                     whoami`): `user` is for simulator workloads",
                ));
            }
            let variants = [
                (
                    "cpu",
                    a.cpu
                        .as_ref()
                        .map(|c| (at(c), c.get_ref().command.as_ref())),
                ),
                (
                    "gpu",
                    a.gpu
                        .as_ref()
                        .map(|g| (at(g), g.get_ref().command.as_ref())),
                ),
            ];
            for (name, variant) in variants {
                let Some((span, command)) = variant else {
                    continue;
                };
                let field = Some(format!("application[{i}].{name}.command"));
                let Some(command) = command else {
                    return Err(src.error(
                        span,
                        field,
                        "missing: the runtime needs the command each task runs",
                    ));
                };
                if command.is_blank() {
                    return Err(src.error(
                        span,
                        field,
                        "must not be empty: give the program to run (`command = \"prog {index}\"` \
                         or `command = [\"prog\", \"{index}\"]`)",
                    ));
                }
            }
        }
        self.check_output_paths()
    }

    /// The runtime's rule for `stdout` and `stderr` templates: each task writes files of its
    /// own. A template that names one file for every task of an application (no `{index}` or
    /// `{task}`), or the same files for two applications (no `{app}` or `{task}`), would have
    /// the tasks truncate each other's output: only the last writer's would be kept, and
    /// `hetsched log` would show it for every task. Checked at submission only (with
    /// [`Workload::check_commands`]), so a job stored before the rule still restores.
    pub fn check_output_paths(&self) -> Result<(), InputError> {
        use super::output_path::{per_app, per_task};
        let src = self.source();
        // Templates without `{app}` or `{task}`, and the first application that gave each.
        let mut shared: HashMap<&str, &str> = HashMap::new();
        for (i, a) in self.applications.iter().enumerate() {
            let name = a.name.get_ref().as_str();
            let count = a.task_count();
            if let Some(w) = &a.workdir
                && let Some(p) = workdir_placeholder(w.get_ref())
            {
                return Err(src.error(
                    at(w),
                    Some(format!("application[{i}].workdir")),
                    format!(
                        "`{p}` in `{}` is not filled in: the workdir is the same directory for \
                         every task (placeholders are filled in the command and in stdout and \
                         stderr paths); make a directory per task in the command instead, e.g. \
                         `mkdir -p run/{{index}} && cd run/{{index}} && …` with --shell",
                        crate::text::clip(w.get_ref())
                    ),
                ));
            }
            for (stream, what) in [(&a.stdout, "stdout"), (&a.stderr, "stderr")] {
                let Some(t) = stream else { continue };
                let template = t.get_ref().as_str();
                let field = Some(format!("application[{i}].{what}"));
                if count > 1 && !per_task(template) {
                    return Err(src.error(
                        at(t),
                        field,
                        format!(
                            "`{}` names one file for all {count} tasks: each would overwrite \
                             the others' output and only the last one's would be kept; put \
                             `{{index}}` (or `{{task}}`) in it, e.g. `{}`, or `none` to discard it",
                            crate::text::clip(template),
                            crate::text::clip(&with_placeholder(template, "index")),
                        ),
                    ));
                }
                if per_app(template) {
                    continue;
                }
                match shared.get(template) {
                    Some(other) if *other != name => {
                        return Err(src.error(
                            at(t),
                            field,
                            format!(
                                "`{}` is also application `{}`'s output path: their tasks \
                                 would overwrite each other's files; put `{{app}}` in it, e.g. \
                                 `{}`",
                                crate::text::clip(template),
                                crate::text::clip(other),
                                crate::text::clip(&with_placeholder(template, "app")),
                            ),
                        ));
                    }
                    _ => {
                        shared.insert(template, name);
                    }
                }
            }
        }
        Ok(())
    }

    /// Every user's shares and caps, `[[user]]` tables in file order (users they do not name
    /// have 1 share and no caps: [`UserLimits::new`]).
    pub fn user_limits(&self) -> Vec<UserLimits> {
        self.users.iter().map(UserSpec::limits).collect()
    }

    /// The variant specs of application `index` (for the runtime's commands).
    pub fn variant_command(&self, index: usize, variant: Variant) -> Option<&Command> {
        let a = self.applications.get(index)?;
        match variant {
            Variant::Cpu => a.cpu.as_ref()?.get_ref().command.as_ref(),
            Variant::Gpu => a.gpu.as_ref()?.get_ref().command.as_ref(),
        }
    }
}

impl ApplicationSpec {
    /// The application's `accelerator` field, `none` when absent.
    pub fn accelerator_need(&self) -> AcceleratorNeed {
        self.accelerator
            .as_ref()
            .map_or(AcceleratorNeed::None, |n| *n.get_ref())
    }
}

/// Refuses an exclusion `!node:NAME` of `requires` (the field `field` of `who`) that names no
/// node of `known`, as `node:NAME` is refused ([`nodes_with`]): a typo would exclude nothing, and
/// the tasks could land on the node meant to be avoided (Slurm refuses an unknown node name in
/// `--exclude`).
fn excluded_known(
    src: &Source<'_>,
    known: &[String],
    requires: &[Spanned<String>],
    field: &str,
    who: &str,
) -> Result<(), InputError> {
    use crate::model::cluster::{NODE_NAME_PREFIX, NOT_PREFIX};
    for (j, r) in requires.iter().enumerate() {
        let r = r.get_ref();
        if let Some(name) = r
            .strip_prefix(NOT_PREFIX)
            .and_then(|l| l.strip_prefix(NODE_NAME_PREFIX))
            && !known.iter().any(|k| k == name)
        {
            return Err(src.error(
                at(&requires[j]),
                Some(format!("{field}[{j}]")),
                format!("{who} requires `{r}`, and no node is named `{name}`"),
            ));
        }
    }
    Ok(())
}

/// The nodes of `cluster` that have every attribute of `requires` (the field `field` of `who`);
/// none is an error naming the first attribute no node has (or the combination), with the
/// attributes the cluster offers.
fn nodes_with<'n>(
    src: &Source<'_>,
    cluster: &'n [Node],
    requires: &[Spanned<String>],
    field: &str,
    who: &str,
) -> Result<Vec<&'n Node>, InputError> {
    let mut attrs: Vec<String> = requires.iter().map(|r| r.get_ref().clone()).collect();
    attrs.sort();
    attrs.dedup();
    let nodes: Vec<&Node> = cluster
        .iter()
        .filter(|n| n.has_attributes(&attrs))
        .collect();
    if !nodes.is_empty() {
        return Ok(nodes);
    }
    // Name the first attribute no node has, or the first of a combination none has.
    let missing = requires.iter().enumerate().find(|(_, r)| {
        !cluster
            .iter()
            .any(|n| n.has_attributes(std::slice::from_ref(r.get_ref())))
    });
    let mut offered: Vec<String> = cluster.iter().flat_map(Node::all_attributes).collect();
    offered.sort();
    offered.dedup();
    let offered = if offered.is_empty() {
        "none".to_string()
    } else {
        offered.join(", ")
    };
    use crate::model::cluster::{NODE_NAME_PREFIX, NOT_PREFIX};
    Err(match missing {
        Some((j, r)) => {
            let r = r.get_ref();
            let why = if let Some(name) = r
                .strip_prefix(NOT_PREFIX)
                .and_then(|l| l.strip_prefix(NODE_NAME_PREFIX))
            {
                format!("{who} requires `{r}`, and `{name}` is the only node")
            } else if let Some(lacked) = r.strip_prefix(NOT_PREFIX) {
                format!("{who} requires `{r}`, and every node has `{lacked}`")
            } else if let Some(name) = r.strip_prefix(NODE_NAME_PREFIX) {
                format!("{who} requires `{r}`, and no node is named `{name}`")
            } else {
                format!("{who} requires `{r}`, which no node has (attributes offered: {offered})")
            };
            src.error(at(&requires[j]), Some(format!("{field}[{j}]")), why)
        }
        None => src.error(
            None,
            Some(field.to_string()),
            format!(
                "{who} requires {}, and no node has them all",
                attrs.join(" + ")
            ),
        ),
    })
}

/// The first placeholder a `workdir` holds, ours (`{index}`) or HyperQueue's (`%{TASK_ID}`),
/// if any: a workdir is taken as written.
fn workdir_placeholder(dir: &str) -> Option<String> {
    let ours = super::output_path::PLACEHOLDERS
        .iter()
        .chain(&["entry"])
        .map(|p| format!("{{{p}}}"))
        .filter_map(|p| dir.find(&p).map(|at| (at, p)));
    let theirs = dir.find("%{").map(|at| {
        let end = dir[at..].find('}').map_or(dir.len(), |e| at + e + 1);
        (at, dir[at..end].to_string())
    });
    ours.chain(theirs).min_by_key(|(at, _)| *at).map(|(_, p)| p)
}

/// `template` with `{name}` put before its file name's extension (`logs/run.out` →
/// `logs/run-{index}.out`), for a message's example.
fn with_placeholder(template: &str, name: &str) -> String {
    let file_start = template.rfind('/').map_or(0, |i| i + 1);
    match template[file_start..].rfind('.') {
        Some(dot) if dot > 0 => {
            let at = file_start + dot;
            format!("{}-{{{name}}}{}", &template[..at], &template[at..])
        }
        _ => format!("{template}-{{{name}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_read_hyperqueues_and_slurms_array_syntax() {
        assert_eq!(parse_indices("1-5"), Ok(vec![1, 2, 3, 4, 5]));
        assert_eq!(parse_indices("0-20:10, 7"), Ok(vec![0, 10, 20, 7]));
        assert_eq!(parse_indices("3"), Ok(vec![3]));
        assert_eq!(parse_indices("1-10:4"), Ok(vec![1, 5, 9]));
        let err = |s: &str| parse_indices(s).expect_err(s);
        assert_eq!(err("5-3"), "`5-3`: the range ends before it starts");
        assert_eq!(err("1-9:0"), "`1-9:0`: the step must be at least 1");
        assert_eq!(err("1,,2"), "an empty item (two commas, or one at an end)");
        assert_eq!(err("1-4,3"), "index 3 is listed twice");
        assert_eq!(err("4:2"), "`4:2`: a step needs a range A-B:STEP");
        assert!(err("x-2").starts_with("`x-2`: expected an index N, a range A-B or A-B:STEP"));
        assert_eq!(err("0-4294967295"), "more than 1000000 indices");
    }

    /// A size is a number of bytes or a string with a unit; a wrong one says how to write it,
    /// where it is.
    #[test]
    fn a_bad_memory_size_says_how_to_write_one() {
        let job = |memory: &str| {
            format!(
                "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = \"true\"\nmemory = {memory}\n"
            )
        };
        let mem = |m: &str| {
            parse_workload("j.toml", &job(m)).map(|w| {
                w.applications[0]
                    .cpu
                    .as_ref()
                    .map(|c| c.get_ref().memory.as_u64())
                    .unwrap_or(0)
            })
        };
        assert_eq!(mem("1024").expect("bytes"), 1024);
        assert_eq!(mem("\"2GiB\"").expect("a size"), 2 << 30);
        for (bad, said) in [
            ("\"-5GiB\"", "invalid size `-5GiB`"),
            ("\"lots\"", "invalid size `lots`"),
            ("-3", "invalid size -3"),
            ("true", "not a size"),
        ] {
            let e = mem(bad).expect_err(bad).to_string();
            assert!(
                e.starts_with("j.toml:6:") && e.contains("memory") && e.contains(said),
                "{bad}: {e}"
            );
            assert!(
                e.contains("write a number of bytes or a size such as \"512MiB\""),
                "{e}"
            );
        }
    }

    #[test]
    fn indices_set_the_task_count_and_must_agree_with_tasks() {
        let job = |extra: &str| {
            format!(
                "[[application]]\nname = \"a\"\n{extra}\n[application.cpu]\ncommand = \"echo {{index}}\"\n"
            )
        };
        let w = parse_workload("j.toml", &job("indices = \"1-3,10\"")).expect("parses");
        assert_eq!(w.applications[0].task_count(), 4);
        assert_eq!(w.applications[0].indices(), Some(vec![1, 2, 3, 10]));
        let e =
            parse_workload("j.toml", &job("tasks = 2\nindices = \"1-3\"")).expect_err("disagree");
        assert_eq!(
            e.to_string(),
            "j.toml:4:11: application[0].indices: lists 3 indices but `tasks` is 2 (one task per index)"
        );
        let e = parse_workload("j.toml", &job("indices = \"2-1\"")).expect_err("bad range");
        assert_eq!(
            e.to_string(),
            "j.toml:3:11: application[0].indices: `2-1`: the range ends before it starts"
        );
    }

    #[test]
    fn a_command_on_the_application_is_pointed_to_its_variant() {
        let text = "[[application]]\nname = \"x\"\ntasks = 3\ncommand = \"echo {index}\"\n";
        let e = parse_workload("j.toml", text).expect_err("misplaced");
        assert!(
            e.to_string().starts_with(
                "j.toml:4:1: application[0].command: `command` belongs to a variant of the \
                 application: write it under [application.cpu]"
            ),
            "{e}"
        );
        // A field that is nobody's keeps serde's list of the expected ones.
        let e = parse_workload("j.toml", &text.replace("command", "comand")).expect_err("typo");
        assert!(
            e.to_string()
                .contains("unknown field `comand`, expected one of"),
            "{e}"
        );
    }

    /// A command of the wrong shape says what a command is and which element is wrong, not
    /// serde's "did not match any variant of untagged enum".
    #[test]
    fn a_command_that_is_neither_a_string_nor_strings_says_what_a_command_is() {
        let job = |command: &str| {
            format!(
                "[[application]]\nname = \"a\"\ntasks = 1\n[application.cpu]\ncommand = {command}\n"
            )
        };
        let e = parse_workload("j.toml", &job("[\"sleep\", 3]"))
            .expect_err("an integer element")
            .to_string();
        assert!(
            e.starts_with(
                "j.toml:5:11: application[0].cpu.command: element 1 of the array is not a string"
            ) && e.contains("quote numbers"),
            "{e}"
        );
        for bad in ["3", "true", "{ a = 1 }"] {
            let e = parse_workload("j.toml", &job(bad))
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("application[0].cpu.command")
                    && e.contains(
                        "expected a command: a string (run with `sh -c`) or an array of strings"
                    )
                    && !e.contains("untagged"),
                "{bad}: {e}"
            );
        }
        let w = parse_workload("j.toml", &job("[\"sleep\", \"3\"]")).expect("strings");
        assert_eq!(
            w.variant_command(0, crate::model::Variant::Cpu),
            Some(&Command::Argv(vec!["sleep".into(), "3".into()]))
        );
        let w = parse_workload("j.toml", &job("\"sleep 3\"")).expect("a line");
        assert_eq!(
            w.variant_command(0, crate::model::Variant::Cpu),
            Some(&Command::Shell("sleep 3".into()))
        );
    }

    #[test]
    fn a_blank_command_is_refused_for_the_runtime() {
        let job = |command: &str, variant: &str| {
            format!(
                "[[application]]\nname = \"a\"\ntasks = 2\n[application.{variant}]\ncommand = {command}\n"
            )
        };
        for variant in ["cpu", "gpu"] {
            for blank in ["\"\"", "\" \\t \"", "[]", "[\"\", \"x\"]"] {
                let w = parse_workload("j.toml", &job(blank, variant)).expect("parses");
                let e = w.check_commands().expect_err(blank).to_string();
                assert!(
                    e.starts_with(&format!(
                        "j.toml:4:1: application[0].{variant}.command: must not be empty"
                    )),
                    "{variant} {blank}: {e}"
                );
            }
            let w = parse_workload("j.toml", &job("\"true\"", variant)).expect("parses");
            assert!(w.check_commands().is_ok());
        }
    }
}
