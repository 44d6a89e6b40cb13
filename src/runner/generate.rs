//! The generation loop shared by `run`, `chat` and `bench` ([`Decoder`]): the prompt in
//! batches, then one token per forward pass, with timings.

use std::time::Instant;

use super::model::{Exec, Model, ModelError, Result, Session};
use super::sample::{Sampler, TokenMask};

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
    /// (empty for no tokens).
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        for chunk in tokens.chunks(self.n_batch) {
            self.model.eval(self.exec, self.session, chunk, false)?;
        }
        Ok(self.session.logits())
    }

    /// Evaluates one token; returns its logits.
    pub fn step(&mut self, id: u32) -> Result<&[f32]> {
        self.model.eval(self.exec, self.session, &[id], false)
    }

    /// Evaluates `tokens` in one pass; returns the logits of every position.
    pub fn eval_all(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        self.model.eval(self.exec, self.session, tokens, true)
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
        let mut history = prompt.to_vec();
        let mut masked = Vec::new();
        let t1 = Instant::now();
        for i in 0..n {
            let logits = self.session.logits();
            let id = match mask.as_deref_mut() {
                None => sampler.sample(logits, &history, prompt.len()),
                Some(m) => {
                    masked.clear();
                    masked.extend_from_slice(logits);
                    m.apply(&mut masked).map_err(ModelError::Grammar)?;
                    sampler.sample(&masked, &history, prompt.len())
                }
            };
            history.push(id);
            stats.gen_tokens += 1;
            let finished = match mask.as_deref_mut() {
                Some(m) if !is_eog(id) => {
                    m.accept(id).map_err(ModelError::Grammar)?;
                    m.is_finished()
                }
                _ => false,
            };
            if !on_token(id) || is_eog(id) || finished || i + 1 == n {
                break;
            }
            self.step(id)?;
        }
        stats.gen_secs = t1.elapsed().as_secs_f64();
        Ok(stats)
    }
}
