//! `libt2p`: the command-line face of t2p. One file per subcommand.

use clap::{Parser, Subcommand};

mod check;

/// Ternary language models on the T2P layout.
#[derive(Parser)]
#[command(name = "libt2p", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show CPU features and the kernel path, and check every runnable path against the oracle.
    Check(check::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => check::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("libt2p: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
