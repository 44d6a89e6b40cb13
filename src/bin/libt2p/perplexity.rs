//! `libt2p perplexity`: llama-perplexity's chunking and scoring, comparable numbers.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use t2p::runner::perplexity::perplexity;

use crate::run::ModelArgs;

/// Options of `libt2p perplexity`.
#[derive(clap::Args)]
pub struct Args {
    /// Model file (`-m`), threads (`-t`); `-c` is the chunk size here.
    #[command(flatten)]
    model: ModelArgs,
    /// The text file to score.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Print `{"chunks": [...], "ppl": f}` instead of llama-perplexity's lines.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let text =
        std::fs::read_to_string(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let (loaded, _) = args.model.load(args.json)?;
    let n_ctx = args.model.ctx_size.unwrap_or(512);
    if n_ctx < 4 {
        return Err("the chunk size (-c) must be at least 4".into());
    }
    let exec = args.model.exec();
    let tok = &loaded.tokenizer;
    let ids = tok.encode(&text, true, true);
    if ids.len() < n_ctx {
        return Err(format!("{} tokens are fewer than one chunk of {n_ctx}", ids.len()).into());
    }
    let bos = if tok.add_bos() { tok.bos() } else { None };
    let t = Instant::now();
    if !args.json {
        eprintln!(
            "perplexity: {} tokens, {} chunks of {n_ctx}",
            ids.len(),
            ids.len() / n_ctx
        );
    }
    let chunks = perplexity(&loaded.model, &exec, &ids, n_ctx, bos, |i, ppl| {
        if !args.json {
            crate::write_stdout(format_args!("[{}]{ppl:.4},", i + 1));
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
    })?;
    let last = *chunks.last().expect("at least one chunk");
    if args.json {
        println!("{}", serde_json::json!({ "chunks": chunks, "ppl": last }));
    } else {
        println!();
        println!("Final estimate: PPL = {last:.4}");
        eprintln!("{:.2} s", t.elapsed().as_secs_f64());
    }
    Ok(ExitCode::SUCCESS)
}
