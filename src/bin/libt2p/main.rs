//! `libt2p`: the command-line face of t2p. One file per subcommand.

use clap::{Parser, Subcommand};

mod bench;
mod chat;
mod check;
mod info;
mod logits;
mod model_bench;
mod perplexity;
mod run;
mod synth;

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
    /// Describe a GGUF file: architecture, hyper-parameters, tensors by type, tokenizer, T2P use.
    Info(info::Args),
    /// Evaluate token ids in one batch and print the top logits of every position.
    Logits(logits::Args),
    /// Perplexity of a text file, chunked and scored as llama-perplexity does.
    Perplexity(perplexity::Args),
    /// Generate text from a prompt, streaming it; ends with speed and % of the memory ceiling.
    Run(run::Args),
    /// Write a synthetic model (real shapes, random ternary weights) for benchmarks.
    Synth(synth::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Check(args) => check::run(args),
        Command::Info(args) => info::run(args),
        Command::Logits(args) => logits::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Run(args) => run::run(args),
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
