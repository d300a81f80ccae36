//! `hetsched binding …`: spec 01's node binding outside any cluster — replay a file of membership
//! changes and print the map, to check a binding by hand or compare implementations.

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use hetsched_core::input::binding::parse_binding_events;
use hetsched_core::policy::binding::{BindingMode, replay};
use std::fmt::Write as _;
use std::path::PathBuf;

/// The binding commands.
#[derive(Debug, Subcommand)]
pub enum BindingCommand {
    /// Replay a file of `add-nnode NAME RACK`, `add-anode NAME RACK [WEIGHT]` and `remove NAME`
    /// lines and print the final map as `NNODE -> ANODE` lines sorted by NNode name.
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
    /// Containers per node in `--mode container`.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub slots: u32,
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

/// Runs one binding command.
pub fn run(cmd: BindingCommand) -> anyhow::Result<()> {
    match cmd {
        BindingCommand::Replay(args) => replay_cmd(args),
    }
}

fn replay_cmd(args: ReplayArgs) -> anyhow::Result<()> {
    let origin = args.file.display().to_string();
    let text =
        std::fs::read_to_string(&args.file).with_context(|| format!("cannot read {origin}"))?;
    let lines = parse_binding_events(&origin, &text)?;
    let mode = match args.mode {
        ModeArg::Plain => BindingMode::Plain,
        ModeArg::Weighted => BindingMode::Weighted,
        ModeArg::Container => BindingMode::Container { slots: args.slots },
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
