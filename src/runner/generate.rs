//! The generation loop shared by `run`, `chat` and `bench`: the prompt in batches, then one
//! token per forward pass, with timings.

use std::time::Instant;

use super::model::{Exec, Model, Result, Session};
use super::sample::Sampler;

/// Timings of one generation.
#[derive(Clone, Copy, Debug, Default)]
pub struct GenStats {
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Seconds spent on them.
    pub prompt_secs: f64,
    /// Tokens generated (sampled).
    pub gen_tokens: usize,
    /// Seconds spent generating (forward passes after the prompt, and sampling).
    pub gen_secs: f64,
}

impl GenStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_secs.max(1e-12)
    }

    /// Generated tokens per second (the first token is sampled from the prompt's logits, so the
    /// rate counts the forward passes it took: `gen_tokens - 1`).
    pub fn gen_tps(&self) -> f64 {
        self.gen_tokens.saturating_sub(1) as f64 / self.gen_secs.max(1e-12)
    }
}

/// Evaluates `tokens` in batches of at most `n_batch`, returning the last position's logits.
pub fn prefill(
    model: &Model,
    exec: &Exec,
    session: &mut Session,
    tokens: &[u32],
    n_batch: usize,
) -> Result<Vec<f32>> {
    let mut logits = Vec::new();
    for chunk in tokens.chunks(n_batch.max(1)) {
        logits = model.forward(exec, session, chunk, false)?;
    }
    Ok(logits)
}

/// Generates up to `n` tokens after `prompt`. `on_token` sees each sampled id and returns
/// `false` to stop; generation also stops after an end-of-generation token (`is_eog`), which is
/// reported to `on_token` but not evaluated.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    model: &Model,
    exec: &Exec,
    session: &mut Session,
    prompt: &[u32],
    n: usize,
    n_batch: usize,
    sampler: &mut Sampler,
    is_eog: impl Fn(u32) -> bool,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<GenStats> {
    let mut stats = GenStats {
        prompt_tokens: prompt.len(),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut logits = prefill(model, exec, session, prompt, n_batch)?;
    stats.prompt_secs = t0.elapsed().as_secs_f64();
    let mut history = prompt.to_vec();
    let t1 = Instant::now();
    for i in 0..n {
        let id = sampler.sample(&logits, &history, prompt.len());
        history.push(id);
        stats.gen_tokens += 1;
        if !on_token(id) || is_eog(id) || i + 1 == n {
            break;
        }
        logits = model.forward(exec, session, &[id], false)?;
    }
    stats.gen_secs = t1.elapsed().as_secs_f64();
    Ok(stats)
}
