//! Perplexity with llama-perplexity's chunking and scoring, so the numbers are comparable:
//! `n_chunk = tokens / n_ctx` chunks, each evaluated alone from an empty context (its first token
//! replaced by BOS when the vocabulary adds one), scoring the second half: the logits at
//! positions `n_ctx/2 .. n_ctx-1` against the next token.

use super::model::{Exec, Logits, Model, Result};

/// Cumulative perplexity after each chunk (the numbers llama-perplexity prints as `[i]`).
pub fn perplexity(
    model: &Model,
    exec: &Exec,
    tokens: &[u32],
    n_ctx: usize,
    bos: Option<u32>,
    mut on_chunk: impl FnMut(usize, f64),
) -> Result<Vec<f64>> {
    let n_vocab = model.n_vocab();
    let first = n_ctx / 2;
    let (mut nll, mut count) = (0.0f64, 0usize);
    let mut out = Vec::new();
    for (i, chunk) in tokens.chunks_exact(n_ctx).enumerate() {
        let mut batch = chunk.to_vec();
        if let Some(b) = bos {
            batch[0] = b;
        }
        let mut session = model.new_session(n_ctx);
        let logits = model.forward_one(exec, &mut session, &batch, Logits::All)?;
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            nll -= log_softmax_at(row, chunk[j + 1] as usize);
            count += 1;
        }
        let ppl = (nll / count as f64).exp();
        on_chunk(i, ppl);
        out.push(ppl);
    }
    Ok(out)
}

/// `log softmax(row)[target]`, in f64.
pub fn log_softmax_at(row: &[f32], target: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    row[target] as f64 - max - sum.ln()
}
