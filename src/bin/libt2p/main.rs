//! `libt2p`: the command-line face of t2p. One file per subcommand.

use clap::{Parser, Subcommand};

// `println!` for every subcommand (a macro defined here is in scope in the modules declared
// after it, and shadows the prelude's): when stdout is closed early, as in
// `libt2p info | head`, the process exits quietly with status 141 (what a process killed by
// SIGPIPE reports) instead of panicking; any other write error ends it with a message.
macro_rules! println {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes to stdout for [`println!`], and for output without a newline (perplexity's running
/// figures); see there for the error handling.
fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("libt2p: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

mod bench;
mod bench_quant;
mod chat;
mod check;
mod convert;
mod info;
mod logits;
mod model_bench;
mod perplexity;
mod progress;
mod run;
mod serve;
mod shape_model;
mod synth;
mod timing;

/// Ternary language models on the T2P layout.
#[derive(Parser)]
#[command(name = "libt2p", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Kernel throughput against the measured memory ceiling, T2P against the stock layout.
    Bench(bench::Args),
    /// A multi-turn conversation using the model's chat template.
    Chat(chat::Args),
    /// Show CPU features and the kernel path, and check every runnable path against the oracle.
    Check(check::Args),
    /// Write a model with its ternary matrices in the T2P layout, which later loads map in place.
    Convert(convert::Args),
    /// Describe a GGUF file: architecture, hyper-parameters, tensors by type, tokenizer, T2P use.
    Info(info::Args),
    /// Evaluate token ids in one batch and print the top logits of every position.
    Logits(logits::Args),
    /// Perplexity of a text file, chunked and scored as llama-perplexity does.
    Perplexity(perplexity::Args),
    /// Generate text from a prompt, streaming it; ends with speed and % of the memory ceiling.
    Run(run::Args),
    /// Serve the model over an OpenAI-compatible HTTP API, with continuous batching.
    Serve(serve::Args),
    /// Write a synthetic model (real shapes, random ternary weights) for benchmarks.
    Synth(synth::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Check(args) => check::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Info(args) => info::run(args),
        Command::Logits(args) => logits::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Synth(args) => synth::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("libt2p: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
