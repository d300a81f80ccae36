//! `hetsched binding …`: spec 01's node binding outside any cluster — replay a file of membership
//! changes and print the map, to check a binding by hand or compare implementations.

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use hetsched_core::input::binding::{BindingCommand as Change, parse_binding_events};
use hetsched_core::policy::binding::{BindingMode, MAX_CONTAINER_SLOTS, MAX_CONTAINERS, replay};
use hetsched_core::text::count;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The binding commands.
#[derive(Debug, Subcommand)]
pub enum BindingCommand {
    /// Replay a file of `add-nnode NAME RACK`, `add-anode NAME RACK [WEIGHT]` and `remove NAME`
    /// lines and print the final map as `NNODE -> ANODE` lines sorted by NNode name. WEIGHT is the
    /// ANode's accelerators' summed speeds: 0.001 to 256000 (at most 256 accelerators, each
    /// 0.001 to 1000), default 1.
    Replay(ReplayArgs),
}

/// Options of `binding replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The event file: one change per line; `#` comments and blank lines are allowed.
    pub file: PathBuf,
    /// How binding balances: plain (the paper), weighted (by accelerator speed), container (task
    /// slots, see --slots).
    #[arg(long, value_enum, default_value_t)]
    pub mode: ModeArg,
    /// Containers per node in `--mode container`: 1 to 1024, and at most 1,000,000 in all
    /// (NNodes added × slots); default 4. The other modes bind whole nodes and ignore it, with a
    /// note.
    #[arg(long, value_parser = slots_arg)]
    pub slots: Option<u32>,
    /// Print each event and the map after it.
    #[arg(long)]
    pub trace: bool,
}

/// The binding modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Whole NNodes balanced by count (spec 01, exactly).
    #[default]
    Plain,
    /// Whole NNodes balanced by summed accelerator speed weights; the ANode counts as a user.
    Weighted,
    /// Every node's containers bound one by one.
    Container,
}

impl ModeArg {
    /// The name users write.
    fn as_str(self) -> &'static str {
        match self {
            ModeArg::Plain => "plain",
            ModeArg::Weighted => "weighted",
            ModeArg::Container => "container",
        }
    }
}

/// Parses a `--slots` value: 1 to [`MAX_CONTAINER_SLOTS`] (each container is bound on its own,
/// so 4,000,000,000 of them asked for tens of gigabytes).
pub fn slots_arg(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if (1..=u64::from(MAX_CONTAINER_SLOTS)).contains(&n) => Ok(n as u32),
        Ok(n) => Err(format!(
            "{n} containers per node: give 1 to {MAX_CONTAINER_SLOTS}"
        )),
        Err(_) => Err(format!(
            "`{text}` is not a number of containers (1 to {MAX_CONTAINER_SLOTS})"
        )),
    }
}

/// Runs one binding command.
pub fn run(cmd: BindingCommand) -> anyhow::Result<()> {
    match cmd {
        BindingCommand::Replay(args) => replay_cmd(args),
    }
}

/// Containers per node in `--mode container` when `--slots` is not given.
const DEFAULT_SLOTS: u32 = 4;

fn replay_cmd(args: ReplayArgs) -> anyhow::Result<()> {
    let origin = args.file.display().to_string();
    // Plain and weighted binding bind whole nodes: `--slots` changes nothing there, which a note
    // says rather than silence.
    if let Some(slots) = args.slots
        && args.mode != ModeArg::Container
    {
        eprintln!(
            "note: --slots {slots} is ignored by --mode {} (only --mode container binds containers)",
            args.mode.as_str()
        );
    }
    let slots = args.slots.unwrap_or(DEFAULT_SLOTS);
    let text = crate::input_file::read_input(&args.file)?;
    let lines = parse_binding_events(&origin, &text)?;
    if args.mode == ModeArg::Container {
        // Every NNode's containers are bound one by one: bound them all before allocating.
        let nnodes = lines
            .iter()
            .filter(|l| matches!(l.command, Change::AddNNode { .. }))
            .count() as u64;
        let containers = nnodes.saturating_mul(u64::from(slots));
        if containers > MAX_CONTAINERS {
            bail!(
                "{origin}: {} × --slots {} is {containers} containers to bind; at most \
                 {MAX_CONTAINERS}",
                count(nnodes, "NNode"),
                slots
            );
        }
    }
    let mode = match args.mode {
        ModeArg::Plain => BindingMode::Plain,
        ModeArg::Weighted => BindingMode::Weighted,
        ModeArg::Container => BindingMode::Container { slots },
    };
    // Everything is written to a buffer and printed only once the whole file has been applied, so
    // a bad line never leaves a map on stdout that looks like a result.
    let mut out = String::new();
    let binding = replay(&origin, &lines, mode, &mut |line, events, binding| {
        if !args.trace {
            return;
        }
        let _ = writeln!(out, "line {}: {}", line.line, line.command);
        for e in events {
            let _ = writeln!(out, "  event: {e}");
        }
        for m in binding.map_lines() {
            let _ = writeln!(out, "  map: {m}");
        }
    })?;
    if args.trace {
        out.push_str("final map:\n");
    }
    for m in binding.map_lines() {
        out.push_str(&m);
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
