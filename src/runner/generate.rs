//! The generation loop shared by `run`, `chat` and `bench` ([`Decoder`]): the prompt in
//! batches, then one token per forward pass (drawn by the shared [`TokenStep`]), with timings.

use std::time::Instant;

use super::model::{Exec, Logits, Model, ModelError, Result, Session};
use super::sample::{Sampler, TokenMask};
use super::step::TokenStep;

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

/// A generation in progress on one session: the model, where it runs and the session it
/// extends. Its methods are the steps every decoding loop is made of (prompt batches, one-token
/// steps, draft verification); none allocates after the session's first pass.
pub struct Decoder<'a> {
    model: &'a Model,
    exec: &'a Exec,
    session: &'a mut Session,
    n_batch: usize,
}

impl<'a> Decoder<'a> {
    /// Extends `session` with `model` on `exec`, evaluating prompts `n_batch` tokens at a time.
    pub fn new(model: &'a Model, exec: &'a Exec, session: &'a mut Session, n_batch: usize) -> Self {
        Decoder {
            model,
            exec,
            session,
            n_batch: n_batch.max(1),
        }
    }

    /// The model.
    pub fn model(&self) -> &Model {
        self.model
    }

    /// The session being extended.
    pub fn session(&mut self) -> &mut Session {
        self.session
    }

    /// Evaluates `tokens` in batches of at most `n_batch`; returns the last position's logits
    /// (those of the session's latest pass for no tokens).
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        let n = tokens.len().div_ceil(self.n_batch);
        for (i, chunk) in tokens.chunks(self.n_batch).enumerate() {
            // Only the last chunk's logits are read.
            let logits = if i + 1 < n {
                Logits::None
            } else {
                Logits::Last
            };
            self.forward(chunk, logits)?;
        }
        Ok(self.session.logits())
    }

    /// Evaluates one token; returns its logits.
    pub fn step(&mut self, id: u32) -> Result<&[f32]> {
        self.forward(&[id], Logits::Last)
    }

    /// Evaluates `tokens` in one pass; returns the logits of every position.
    pub fn eval_all(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        self.forward(tokens, Logits::All)
    }

    fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<&[f32]> {
        self.model
            .forward_one(self.exec, self.session, tokens, logits)
    }

    /// Generates up to `n` tokens after `prompt`. `on_token` sees each sampled id and returns
    /// `false` to stop; generation also stops after an end-of-generation token (`is_eog`),
    /// which is reported to `on_token` but not evaluated.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        is_eog: impl Fn(u32) -> bool,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<GenStats> {
        self.generate_with(prompt, n, sampler, None, is_eog, on_token)
    }

    /// As [`generate`](Self::generate), sampling only what `mask` allows (a grammar: see
    /// `runner::constrain`); generation also stops when the mask is finished.
    pub fn generate_masked(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        mask: &mut dyn TokenMask,
        is_eog: impl Fn(u32) -> bool,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<GenStats> {
        self.generate_with(prompt, n, sampler, Some(mask), is_eog, on_token)
    }

    fn generate_with(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
        mut mask: Option<&mut dyn TokenMask>,
        is_eog: impl Fn(u32) -> bool,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> Result<GenStats> {
        let mut stats = GenStats {
            prompt_tokens: prompt.len(),
            ..Default::default()
        };
        let t0 = Instant::now();
        self.prefill(prompt)?;
        stats.prompt_secs = t0.elapsed().as_secs_f64();
        let mut pick = TokenStep::new(prompt);
        let t1 = Instant::now();
        for i in 0..n {
            let logits = self.session.logits();
            let drawn = pick
                .draw(logits, sampler, mask.as_deref_mut(), &is_eog)
                .map_err(|e| ModelError::Grammar(e.to_string()))?;
            stats.gen_tokens += 1;
            if !on_token(drawn.id) || drawn.stop.is_some() || i + 1 == n {
                break;
            }
            self.step(drawn.id)?;
        }
        stats.gen_secs = t1.elapsed().as_secs_f64();
        Ok(stats)
    }
}
