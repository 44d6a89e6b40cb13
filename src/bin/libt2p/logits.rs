//! `libt2p logits`: evaluate ids in one batch and print the top logits of every position.

use std::process::ExitCode;

use t2p::runner::model::Logits;

use crate::run::ModelArgs;

/// Options of `libt2p logits`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Token ids, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    ids: Vec<u32>,
    /// How many of the largest logits to print per position.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Print `{"positions": [{"top_ids": [..], "top_logits": [..]}, ..]}`.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (loaded, _) = args.model.load(true)?;
    let exec = args.model.exec();
    let model = &loaded.model;
    let mut session = model.new_session(args.ids.len());
    let logits = model.forward_one(&exec, &mut session, &args.ids, Logits::All)?;
    let nv = model.n_vocab();
    let positions: Vec<(Vec<u32>, Vec<f32>)> = logits
        .chunks_exact(nv)
        .map(|row| {
            let mut idx: Vec<u32> = (0..nv as u32).collect();
            idx.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            idx.truncate(args.top);
            let vals = idx.iter().map(|&i| row[i as usize]).collect();
            (idx, vals)
        })
        .collect();
    if args.json {
        let pos: Vec<_> = positions
            .iter()
            .map(|(i, v)| serde_json::json!({ "top_ids": i, "top_logits": v }))
            .collect();
        println!("{}", serde_json::json!({ "positions": pos }));
    } else {
        for (p, (ids, vals)) in positions.iter().enumerate() {
            let pairs: Vec<String> = ids
                .iter()
                .zip(vals)
                .map(|(i, v)| format!("{i}:{v:.4}"))
                .collect();
            println!("[{p}] {}", pairs.join(" "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
