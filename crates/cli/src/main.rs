//! `hetsched`: the one command of the project — the simulator (`hetsched sim …`), and the runtime's
//! server, agent and client commands.

mod accel_paper;
mod binding;
mod graph;
mod input_file;
mod out_dir;
mod runtime;
mod sim;
mod sim_accel;
mod sim_divisible;
mod sim_stream;
mod sim_sweep;
mod stream;
mod topology;

use clap::{CommandFactory, Parser, Subcommand};

/// A scheduler for heterogeneous clusters.
#[derive(Debug, Parser)]
#[command(name = "hetsched", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the discrete-event simulator: the papers' experiments or your own cluster and workload.
    ///
    /// Input files must be regular files of at most 256 MiB.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// Spec 01's node binding on its own: replay membership changes and print the map.
    ///
    /// Input files must be regular files of at most 256 MiB.
    #[command(subcommand)]
    Binding(binding::BindingCommand),
    /// Stream topologies (spec 04): place a topology's executors on nodes and processes.
    ///
    /// Input files must be regular files of at most 256 MiB.
    #[command(subcommand)]
    Stream(stream::StreamCommand),
    #[command(flatten)]
    Runtime(Box<runtime::RuntimeCommand>),
    /// Long-running stream topologies on the runtime: submit, list, show, log, kill, rebalance, purge.
    #[command(subcommand)]
    Topology(topology::TopologyCommand),
    /// A stream topology's worker process (started by agents).
    #[command(hide = true)]
    StreamWorker(topology::StreamWorkerArgs),
    /// Bind this process to CPUs and become a pinned task's program (started by agents:
    /// `hetsched_agent::cpus`).
    #[command(hide = true, name = "pin-exec")]
    PinExec {
        /// The CPUs, `0,1`.
        #[arg(long)]
        cpus: String,
        /// The program and its arguments.
        #[arg(last = true, required = true, value_parser = clap::value_parser!(std::ffi::OsString))]
        command: Vec<std::ffi::OsString>,
    },
    /// Wait for the agent whose pipe is this process's standard input to end, then kill the
    /// tasks it left running (started by agents: `hetsched_agent::guard`).
    #[command(hide = true, name = "agent-guard")]
    AgentGuard {
        /// The agent's work directory.
        #[arg(long)]
        work_dir: std::path::PathBuf,
        /// The agent's log settings: the guard's line goes where the agent's log goes.
        #[command(flatten)]
        logs: runtime::logging::LogArgs,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// `hetsched agent-guard`: its one line goes where the agent's log goes (`--log-file`,
/// `--log-format`, which the agent passes on), else to the agent's standard error, which it
/// shares. The file is opened only once there is a line to write.
fn agent_guard(
    work_dir: &std::path::Path,
    logs: &runtime::logging::LogArgs,
) -> std::process::ExitCode {
    use hetsched_agent::guard::{LOCK_WAIT, Outcome, run};
    let outcome = run(std::io::stdin().lock(), work_dir, LOCK_WAIT);
    if matches!(outcome, Ok(Outcome::Killed(0) | Outcome::TakenOver)) {
        return std::process::ExitCode::SUCCESS;
    }
    let format = logs.log_format.unwrap_or_default();
    let file = logs.log_file.as_ref().and_then(|path| {
        runtime::logging::LogFile::open(path, "--log-file")
            .inspect_err(|e| eprintln!("hetsched agent-guard: {e:#}; writing to standard error"))
            .ok()
    });
    runtime::logging::init("info", format, file.map(std::sync::Arc::new));
    match outcome {
        Ok(Outcome::Killed(n)) => {
            tracing::warn!(
                target: "hetsched_agent::guard",
                "hetsched agent-guard: the agent of {} ended with {} running: killed {}",
                work_dir.display(),
                hetsched_core::text::count(n as u64, "task process group"),
                if n == 1 { "it" } else { "them" }
            );
            std::process::ExitCode::SUCCESS
        }
        Ok(Outcome::TakenOver) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(
                target: "hetsched_agent::guard",
                "hetsched agent-guard: {}: {e}",
                work_dir.display()
            );
            std::process::ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Command::PinExec { cpus, command } = &cli.command {
        // Returns only if the program could not be started.
        let e = hetsched_agent::cpus::pin_exec(cpus, command);
        eprintln!("hetsched pin-exec: {e}");
        return std::process::ExitCode::from(e.exit_code() as u8);
    }
    if let Command::AgentGuard { work_dir, logs } = &cli.command {
        return agent_guard(work_dir, logs);
    }
    if !matches!(&cli.command, Command::Runtime(c) if c.long_running()) {
        runtime::human::quiet_broken_pipe();
    }
    let result = match cli.command {
        Command::Sim(cmd) => sim::run(cmd),
        Command::Binding(cmd) => binding::run(cmd),
        Command::Stream(cmd) => stream::run(cmd),
        Command::Runtime(cmd) => runtime::run(*cmd),
        Command::Topology(cmd) => topology::run(cmd),
        Command::StreamWorker(args) => topology::run_worker(args),
        Command::PinExec { .. } | Command::AgentGuard { .. } => Ok(()),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "hetsched",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if runtime::human::is_broken_pipe(&e) => {
            std::process::ExitCode::from(runtime::human::BROKEN_PIPE_STATUS as u8)
        }
        Err(e) => {
            eprintln!("error: {}", runtime::human::error_chain(&e));
            runtime::human::exit_status(&e).map_or(
                std::process::ExitCode::FAILURE,
                std::process::ExitCode::from,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// A command group whose help names its subcommands as `hetsched GROUP a|b|c` (`node`, `user`)
    /// (or ends with `: a, b, c`, `topology`) names every one of them, so that `hetsched --help` does not hide one (`user limit` was
    /// missing) and names none that does not exist.
    #[test]
    fn a_command_groups_help_lists_every_subcommand_it_has() {
        let cli = Cli::command();
        let mut checked = 0;
        for group in cli.get_subcommands() {
            let about = group.get_about().map(|a| a.to_string()).unwrap_or_default();
            let marker = format!("`hetsched {} ", group.get_name());
            let listed = if let Some(at) = about.find(&marker) {
                // `hetsched node remove|drain|resume|stop NAME`
                let list = about[at + marker.len()..]
                    .split([' ', '`'])
                    .next()
                    .unwrap_or_default();
                if !list.contains('|') {
                    continue;
                }
                list.to_string()
            } else {
                // `…: submit, list, show, kill, rebalance` at the end of the line.
                let Some((_, tail)) = about.rsplit_once(": ") else {
                    continue;
                };
                let words: Vec<&str> = tail.split(", ").collect();
                if words.len() < 2
                    || words
                        .iter()
                        .any(|w| w.is_empty() || !w.chars().all(|c| c.is_ascii_lowercase()))
                {
                    continue;
                }
                words.join("|")
            };
            let list = listed.as_str();
            let mut listed: Vec<&str> = list.split('|').collect();
            listed.sort_unstable();
            let mut actual: Vec<&str> = group
                .get_subcommands()
                .map(|c| c.get_name())
                .filter(|n| *n != "help")
                .collect();
            actual.sort_unstable();
            assert_eq!(
                listed,
                actual,
                "`hetsched {} --help` names {list}",
                group.get_name()
            );
            checked += 1;
        }
        assert!(
            checked >= 3,
            "the `node`, `user` and `topology` groups are checked"
        );
    }
}
