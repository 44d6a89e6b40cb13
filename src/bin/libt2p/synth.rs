//! `libt2p synth`: write a synthetic model with real shapes and random ternary weights.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use t2p::runner::GgufFile;
use t2p::runner::synth::{QWEN3_SHAPES, write_qwen3};

/// Options of `libt2p synth`.
#[derive(clap::Args)]
pub struct Args {
    /// Shape: bonsai-1.7b, bonsai-4b, bonsai-8b or qwen3-test.
    #[arg(long)]
    shape: String,
    /// A GGUF whose `tokenizer.*` metadata is copied (e.g. a Qwen vocab GGUF).
    #[arg(long)]
    vocab: PathBuf,
    /// Output file.
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let Some(shape) = QWEN3_SHAPES.iter().find(|s| s.name == args.shape) else {
        let names: Vec<_> = QWEN3_SHAPES.iter().map(|s| s.name).collect();
        return Err(format!(
            "unknown shape {:?} (known: {})",
            args.shape,
            names.join(", ")
        )
        .into());
    };
    let vocab = GgufFile::open(&args.vocab)?;
    let t = Instant::now();
    write_qwen3(&args.output, shape, &vocab, args.seed)?;
    let bytes = std::fs::metadata(&args.output)?.len();
    eprintln!(
        "wrote {} ({:.1} MB) in {:.1} s",
        args.output.display(),
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
