//! `libt2p convert`: write a model with its ternary matrices already in the T2P layout, which
//! later loads map in place instead of repacking.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use t2p::runner::LoadOptions;
use t2p::runner::convert::convert;

/// Options of `libt2p convert`.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model to convert (pq2_0, Q2_0, tq1_0, tq2_0, ptq1_0 matrices; the rest is
    /// copied as it is).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Output file: a GGUF only t2p reads (its T2P tensor types are t2p's own).
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// Threads that read and repack (default: all CPUs, at most 8).
    #[arg(short = 't', long)]
    threads: Option<usize>,
}

/// Runs `libt2p convert`.
pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    if args.output.exists() && same_file(&args.model, &args.output)? {
        return Err("the output would overwrite the model being converted".into());
    }
    let mut opts = LoadOptions {
        progress: crate::progress::load_bar(false),
        ..Default::default()
    };
    if let Some(t) = args.threads {
        opts.threads = t.max(1);
    }
    let t = Instant::now();
    let report = convert(&args.model, &args.output, &opts)?;
    println!(
        "wrote {} ({:.1} MB) in {:.1} s: {} matrices in the T2P layout, {} tensors copied",
        args.output.display(),
        report.bytes as f64 / 1e6,
        t.elapsed().as_secs_f64(),
        report.t2p_tensors,
        report.copied_tensors
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether two existing paths name the same file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> std::io::Result<bool> {
    Ok(std::fs::canonicalize(a)? == std::fs::canonicalize(b)?)
}
