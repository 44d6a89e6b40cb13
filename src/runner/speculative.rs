//! Speculative decoding with prompt-lookup drafts: guess the next tokens by finding the current
//! suffix earlier in the context, verify the guesses in one forward pass (a batch of 2-4 columns
//! is one padded gemm tile, so the weights are read once), keep the longest prefix greedy agrees
//! with, and roll the rest back. Under greedy sampling the output is identical to plain greedy:
//! every kernel gives bit-identical results whatever the batch width.

use std::time::Instant;

use super::generate::{Decoder, GenStats};
use super::model::Result;
use super::sample::argmax;
use super::step::check_draft;

/// Prompt-lookup drafter settings.
#[derive(Clone, Copy, Debug)]
pub struct LookupConfig {
    /// Longest suffix n-gram searched for.
    pub max_ngram: usize,
    /// Shortest suffix n-gram accepted as a match.
    pub min_ngram: usize,
    /// Most tokens drafted at once. 3 keeps a verification batch within one 4-column tile.
    pub max_draft: usize,
    /// Draft only while the measured acceptance and verification cost promise a gain
    /// ([`DraftModel`]); `false` drafts whenever the lookup finds a match.
    pub adaptive: bool,
}

impl Default for LookupConfig {
    fn default() -> Self {
        LookupConfig {
            max_ngram: 3,
            min_ngram: 1,
            max_draft: 3,
            adaptive: true,
        }
    }
}

/// Proposes up to `max` tokens: those that followed the most recent earlier occurrence of the
/// longest suffix of `context` (between `min_ngram` and `max_ngram` tokens long). When that
/// continuation runs into the end of the context (the text repeats with a period shorter than
/// the draft), it is extended periodically: a loop `x y x y` drafts `x y x`, not just `x`.
pub fn lookup_draft(context: &[u32], cfg: &LookupConfig, max: usize) -> Vec<u32> {
    let n = context.len();
    for len in (cfg.min_ngram.max(1)..=cfg.max_ngram.min(n.saturating_sub(1))).rev() {
        let suffix = &context[n - len..];
        // The most recent earlier occurrence wins (recent text predicts best).
        if let Some(start) = (0..n - len).rev().find(|&s| &context[s..s + len] == suffix) {
            let from = start + len;
            let period = n - from;
            return (0..max).map(|i| context[from + i % period]).collect();
        }
    }
    Vec::new()
}

/// Counters of a drafted generation.
#[derive(Clone, Copy, Debug, Default)]
pub struct DraftStats {
    /// Tokens proposed.
    pub drafted: usize,
    /// Tokens proposed and accepted.
    pub accepted: usize,
    /// Verification passes (forward passes over a draft).
    pub verifications: usize,
    /// One-token decode steps (no draft, or drafting did not pay).
    pub plain_steps: usize,
    /// Drafts the adaptive policy declined but scored against the tokens that followed.
    pub shadow_drafted: usize,
    /// Tokens of those shadow drafts that greedy decoding produced.
    pub shadow_accepted: usize,
    /// The adaptive policy's final estimates ([`DraftModel::summary`]); `None` when drafting
    /// was not adaptive or never measured both costs.
    pub estimate: Option<DraftEstimate>,
}

/// What the adaptive policy expects at the end of a generation.
#[derive(Clone, Copy, Debug)]
pub struct DraftEstimate {
    /// Seconds of a one-token decode.
    pub decode_secs: f64,
    /// Draft length with the best expected tokens per second.
    pub best_len: usize,
    /// Seconds of verifying a draft of `best_len` tokens (measured or interpolated).
    pub verify_secs: f64,
    /// Estimated probability that a draft token is accepted given its predecessors were.
    pub acceptance: f64,
    /// Expected tokens per verification of `best_len`: `1 + a + a^2 + ... + a^best_len`.
    pub tokens_per_verify: f64,
    /// Expected speed-up of drafting `best_len` over plain decoding:
    /// `tokens_per_verify * decode_secs / verify_secs`.
    pub gain: f64,
    /// Expected tokens per second of the steps the generation took (its plain decodes and
    /// verifications of each length, at the final cost and acceptance estimates): the number
    /// to compare with the measured speed.
    pub expected_tps: f64,
}

impl DraftEstimate {
    /// Expected tokens per second while drafting `best_len`.
    pub fn drafting_tps(&self) -> f64 {
        self.tokens_per_verify / self.verify_secs
    }

    /// Expected tokens per second of plain decoding.
    pub fn plain_tps(&self) -> f64 {
        1.0 / self.decode_secs
    }
}

/// A running mean that follows slow drifts (the context grows) but not single outliers (a
/// preempted step): exponential smoothing, each sample clamped to 3x the current value.
#[derive(Clone, Copy, Debug, Default)]
struct Smoothed {
    value: f64,
    samples: u32,
}

impl Smoothed {
    fn push(&mut self, x: f64) {
        if self.samples == 0 {
            self.value = x;
        } else {
            self.value += 0.2 * (x.min(3.0 * self.value) - self.value);
        }
        self.samples += 1;
    }

    fn get(&self) -> Option<f64> {
        (self.samples > 0).then_some(self.value)
    }
}

/// The adaptive drafting policy's measurements: the cost of a one-token decode, the cost of
/// verifying a draft of each length, and the acceptance of draft tokens (a geometric model: each
/// draft token is accepted with probability `a` once its predecessors were; counts decay so
/// that the estimate follows the text). A draft of `k` tokens then yields
/// `E_k = 1 + a + ... + a^k` tokens per verification, and drafting pays while
/// `E_k * t_decode / t_verify(k) > 1`.
#[derive(Clone, Debug)]
pub struct DraftModel {
    decode: Smoothed,
    verify: Vec<Smoothed>,
    accepted: f64,
    rejected: f64,
    /// Steps taken: plain decodes, and verifications per draft length.
    plain_steps: usize,
    verify_steps: Vec<usize>,
}

/// Weight of old acceptance outcomes per new one.
const ACCEPT_DECAY: f64 = 0.97;

impl DraftModel {
    /// No measurements yet, drafts of up to `max_draft` tokens.
    pub fn new(max_draft: usize) -> Self {
        DraftModel {
            decode: Smoothed::default(),
            verify: vec![Smoothed::default(); max_draft.max(1)],
            accepted: 0.0,
            rejected: 0.0,
            plain_steps: 0,
            verify_steps: vec![0; max_draft.max(1)],
        }
    }

    /// Records a one-token decode that took `secs`.
    pub fn record_decode(&mut self, secs: f64) {
        self.decode.push(secs);
        self.plain_steps += 1;
    }

    /// Records a verification of `len` draft tokens that took `secs` (rollback included).
    pub fn record_verify(&mut self, len: usize, secs: f64) {
        if let Some(v) = self.verify.get_mut(len.wrapping_sub(1)) {
            v.push(secs);
            self.verify_steps[len - 1] += 1;
        }
    }

    /// Records the outcome of a draft: `accepted` of `len` tokens were what greedy produced.
    pub fn record_outcome(&mut self, len: usize, accepted: usize) {
        let rejected = usize::from(accepted < len);
        self.accepted =
            self.accepted * ACCEPT_DECAY.powi(accepted as i32 + rejected as i32) + accepted as f64;
        self.rejected =
            self.rejected * ACCEPT_DECAY.powi(accepted as i32 + rejected as i32) + rejected as f64;
    }

    /// `P(accept | predecessors accepted)`, with a uniform prior (0.5 before any outcome).
    pub fn acceptance(&self) -> f64 {
        (self.accepted + 1.0) / (self.accepted + self.rejected + 2.0)
    }

    /// Whether a one-token decode has been timed.
    pub fn knows_decode(&self) -> bool {
        self.decode.get().is_some()
    }

    /// Whether any verification has been timed.
    pub fn knows_verify(&self) -> bool {
        self.verify.iter().any(|v| v.get().is_some())
    }

    /// Seconds of verifying `len` tokens: measured, or interpolated linearly in the draft length
    /// from the decode and the nearest measured length.
    fn verify_secs(&self, len: usize) -> Option<f64> {
        let t1 = self.decode.get()?;
        if let Some(t) = self.verify.get(len.checked_sub(1)?)?.get() {
            return Some(t);
        }
        let (j, tj) = self
            .verify
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.get().map(|t| (i + 1, t)))
            .min_by_key(|&(j, _)| j.abs_diff(len))?;
        Some(t1 + (tj - t1) * len as f64 / j as f64)
    }

    /// The best draft length of at most `avail` tokens and its expected gain over plain decoding,
    /// once both costs are known.
    pub fn best(&self, avail: usize) -> Option<DraftEstimate> {
        let t1 = self.decode.get()?;
        let a = self.acceptance();
        (1..=avail.min(self.verify.len()))
            .filter_map(|k| {
                let tv = self.verify_secs(k)?.max(1e-9);
                let e = expected_tokens(a, k);
                Some(DraftEstimate {
                    decode_secs: t1,
                    best_len: k,
                    verify_secs: tv,
                    acceptance: a,
                    tokens_per_verify: e,
                    gain: e * t1 / tv,
                    expected_tps: 0.0,
                })
            })
            .max_by(|x, y| x.gain.total_cmp(&y.gain))
    }

    /// [`DraftModel::best`] over every draft length, with [`DraftEstimate::expected_tps`] of
    /// the steps actually taken.
    pub fn summary(&self) -> Option<DraftEstimate> {
        let mut e = self.best(self.verify.len())?;
        let (mut tokens, mut secs) = (
            self.plain_steps as f64,
            self.plain_steps as f64 * e.decode_secs,
        );
        for (k, &count) in self.verify_steps.iter().enumerate() {
            if count > 0 {
                tokens += count as f64 * expected_tokens(e.acceptance, k + 1);
                secs += count as f64 * self.verify_secs(k + 1)?;
            }
        }
        e.expected_tps = tokens / secs.max(1e-12);
        Some(e)
    }
}

/// `1 + a + a^2 + ... + a^k`: tokens a verification of `k` draft tokens yields on average.
fn expected_tokens(a: f64, k: usize) -> f64 {
    1.0 + (1..=k).map(|i| a.powi(i as i32)).sum::<f64>()
}

impl DraftStats {
    /// Accepted / drafted.
    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.drafted.max(1) as f64
    }
}

/// How a drafted generation proposes tokens.
pub struct Drafting<'p, D> {
    /// `draft(context, max)` proposes up to `max` tokens to follow `context` (prompt and
    /// tokens so far).
    pub draft: D,
    /// Most tokens drafted at once.
    pub max_draft: usize,
    /// The adaptive policy: with one, a step drafts only while [`DraftModel::best`] expects a
    /// gain over a one-token decode, with the length it expects to be fastest, and a declined
    /// draft is kept as a shadow and scored against the tokens plain decoding produces, so the
    /// acceptance estimate stays current. Without one, every proposal is verified and the
    /// draft length grows by one after a fully accepted draft (up to `max_draft`) and drops to
    /// one past the accepted prefix otherwise.
    pub policy: Option<&'p mut DraftModel>,
}

/// Plain decodes between forced verifications while the policy declines to draft (so a verify
/// cost measured under a transient load is measured again), and verifications between forced
/// plain decodes while it drafts (so the decode cost follows the growing context).
const REPROBE_EVERY: usize = 48;

/// The state of a drafted generation between steps: the tokens so far and where to stop, the
/// counters, and the policy's view (a declined draft being scored, the runs of each kind of
/// step, the next draft length without a policy).
struct DraftRun<'p, E, T> {
    context: Vec<u32>,
    stats: GenStats,
    drafts: DraftStats,
    n: usize,
    is_eog: E,
    on_token: T,
    policy: Option<&'p mut DraftModel>,
    max_draft: usize,
    draft_len: usize,
    /// A declined draft being scored: its tokens and the context length it was proposed at.
    shadow: Option<(Vec<u32>, usize)>,
    plain_run: usize,
    verify_run: usize,
}

impl<E: Fn(u32) -> bool, T: FnMut(u32) -> bool> DraftRun<'_, E, T> {
    /// Emits `id`; false when generation must stop.
    fn emit(&mut self, id: u32) -> bool {
        self.context.push(id);
        self.stats.gen_tokens += 1;
        (self.on_token)(id) && !(self.is_eog)(id) && self.stats.gen_tokens < self.n
    }

    /// How many tokens to ask the drafter for.
    fn ask(&self) -> usize {
        let want = match self.policy {
            Some(_) => self.max_draft,
            None => self.draft_len,
        };
        (self.n - self.stats.gen_tokens).min(want)
    }

    /// How many of the `proposed` tokens to verify now (0: decode one token plainly).
    fn take(&mut self, proposed: usize) -> usize {
        let take = match self.policy.as_deref() {
            None => proposed,
            Some(_) if proposed == 0 => 0,
            Some(p) if !p.knows_decode() => 0,
            Some(p) if !p.knows_verify() => proposed,
            Some(p) => match p.best(proposed) {
                Some(e) if e.gain > 1.0 && self.verify_run < REPROBE_EVERY => e.best_len,
                Some(e) if e.gain <= 1.0 && self.plain_run >= REPROBE_EVERY => e.best_len,
                _ => 0,
            },
        };
        if take > 0 {
            (self.plain_run, self.verify_run) = (0, self.verify_run + 1);
        } else {
            (self.plain_run, self.verify_run) = (self.plain_run + 1, 0);
        }
        take
    }

    /// Keeps a declined draft to score (one at a time).
    fn shadow(&mut self, draft: Vec<u32>) {
        if self.policy.is_some() && self.shadow.is_none() && !draft.is_empty() {
            self.drafts.shadow_drafted += draft.len();
            self.shadow = Some((draft, self.context.len()));
        }
    }

    /// Scores the shadow draft against the tokens emitted since, once it is decided.
    fn score_shadow(&mut self) {
        let (Some(p), Some((tokens, at))) = (self.policy.as_deref_mut(), self.shadow.as_ref())
        else {
            return;
        };
        let got = &self.context[*at..];
        let matched = got.iter().zip(tokens).take_while(|(g, t)| g == t).count();
        if matched < got.len().min(tokens.len()) || matched == tokens.len() {
            p.record_outcome(tokens.len(), matched);
            self.drafts.shadow_accepted += matched;
            self.shadow = None;
        }
    }

    /// Books a verification of `len` tokens of which `accepted` were kept.
    fn verified(&mut self, len: usize, accepted: usize, secs: f64) {
        self.drafts.drafted += len;
        self.drafts.accepted += accepted;
        self.drafts.verifications += 1;
        if let Some(p) = self.policy.as_deref_mut() {
            p.record_verify(len, secs);
            p.record_outcome(len, accepted);
        }
        self.draft_len = if accepted == len {
            (self.draft_len + 1).min(self.max_draft)
        } else {
            (accepted + 1).max(1)
        };
    }
}

impl Decoder<'_> {
    /// Greedy generation of up to `n` tokens with prompt-lookup drafting; `is_eog` and
    /// `on_token` as in [`Decoder::generate`]. Produces exactly the tokens plain greedy would.
    pub fn generate_lookup(
        &mut self,
        prompt: &[u32],
        n: usize,
        cfg: &LookupConfig,
        is_eog: impl Fn(u32) -> bool,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<(GenStats, DraftStats)> {
        let mut policy = cfg.adaptive.then(|| DraftModel::new(cfg.max_draft));
        let drafting = Drafting {
            draft: |context: &[u32], max: usize| lookup_draft(context, cfg, max),
            max_draft: cfg.max_draft,
            policy: policy.as_mut(),
        };
        self.generate_drafted(prompt, n, drafting, is_eog, on_token)
    }

    /// Greedy generation with any drafter ([`Drafting`]). The first steps decode plainly (to
    /// time a decode), then draft (to time a verification). Output is the same as plain greedy
    /// whatever the drafter proposes and the policy decides.
    pub fn generate_drafted(
        &mut self,
        prompt: &[u32],
        n: usize,
        mut drafting: Drafting<impl FnMut(&[u32], usize) -> Vec<u32>>,
        is_eog: impl Fn(u32) -> bool,
        on_token: impl FnMut(u32) -> bool,
    ) -> Result<(GenStats, DraftStats)> {
        let max_draft = drafting.max_draft.max(1);
        let mut run = DraftRun {
            context: prompt.to_vec(),
            stats: GenStats {
                prompt_tokens: prompt.len(),
                ..Default::default()
            },
            drafts: DraftStats::default(),
            n,
            is_eog,
            on_token,
            policy: drafting.policy.take(),
            max_draft,
            draft_len: max_draft,
            shadow: None,
            plain_run: 0,
            verify_run: 0,
        };
        let t0 = Instant::now();
        let mut next = argmax(self.prefill(prompt)?);
        run.stats.prompt_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut go = n > 0 && run.emit(next);
        let mut batch = Vec::with_capacity(max_draft + 1);
        while go {
            let ask = run.ask();
            let mut draft = (drafting.draft)(&run.context, ask);
            draft.truncate(ask);
            let take = run.take(draft.len());
            if take == 0 {
                run.shadow(draft);
                let t = Instant::now();
                next = argmax(self.step(next)?);
                if let Some(p) = run.policy.as_deref_mut() {
                    p.record_decode(t.elapsed().as_secs_f64());
                }
                run.drafts.plain_steps += 1;
                go = run.emit(next);
                run.score_shadow();
                continue;
            }
            run.shadow = None;
            draft.truncate(take);
            let t = Instant::now();
            let (accepted, following) = self.verify(next, &draft, &mut batch)?;
            run.verified(draft.len(), accepted, t.elapsed().as_secs_f64());
            go = draft[..accepted].iter().all(|&d| run.emit(d)) && run.emit(following);
            next = following;
        }
        run.drafts.estimate = run.policy.and_then(|p| p.summary());
        run.stats.gen_secs = t1.elapsed().as_secs_f64();
        Ok((run.stats, run.drafts))
    }

    /// Verifies `draft` as the continuation of `next` (the token sampled last, not yet
    /// evaluated) in one forward pass over both (`batch` is its scratch); keeps `next` and the
    /// accepted prefix in the session and drops the rest (the KV cache truncates; a recurrent
    /// state returns to a checkpoint and replays what was kept). Returns how many draft tokens
    /// greedy agrees with and the token greedy picks after them.
    pub fn verify(
        &mut self,
        next: u32,
        draft: &[u32],
        batch: &mut Vec<u32>,
    ) -> Result<(usize, u32)> {
        let base = self.session().len();
        let checkpoint = self.session().checkpoint();
        batch.clear();
        batch.push(next);
        batch.extend_from_slice(draft);
        let nv = self.model().n_vocab();
        let rows = self.eval_all(batch)?;
        let (accepted, following) = check_draft(rows, nv, draft, |row| Some(argmax(row)));
        let following = following.expect("greedy draws a token from every row");
        if accepted < draft.len() {
            if self.session().recurrent.is_some() {
                self.session().rollback(&checkpoint)?;
                self.eval_all(&batch[..accepted + 1])?;
            } else {
                self.session().truncate(base + accepted + 1);
            }
        }
        Ok((accepted, following))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_follow_the_latest_earlier_match_of_the_longest_suffix() {
        let cfg = LookupConfig {
            max_ngram: 3,
            min_ngram: 1,
            max_draft: 3,
            adaptive: false,
        };
        // suffix [7, 8] occurred at 1..3 followed by 9, 10, 11.
        assert_eq!(
            lookup_draft(&[5, 7, 8, 9, 10, 11, 7, 8], &cfg, 3),
            vec![9, 10, 11]
        );
        assert_eq!(
            lookup_draft(&[5, 7, 8, 9, 10, 11, 7, 8], &cfg, 2),
            vec![9, 10]
        );
        // The more recent occurrence of [1] wins.
        assert_eq!(lookup_draft(&[1, 2, 1, 3, 1], &cfg, 1), vec![3]);
        assert!(lookup_draft(&[1, 2, 3], &cfg, 3).is_empty());
        // A loop shorter than the draft continues periodically.
        assert_eq!(lookup_draft(&[4, 1, 2, 1, 2], &cfg, 3), vec![1, 2, 1]);
        assert_eq!(lookup_draft(&[4, 9, 9, 9], &cfg, 3), vec![9, 9, 9]);
        assert!(lookup_draft(&[], &cfg, 3).is_empty());
    }

    #[test]
    fn the_policy_drafts_only_when_the_expected_gain_exceeds_one() {
        // Cheap verification, every draft accepted: draft the longest.
        let mut m = DraftModel::new(3);
        assert!(m.best(3).is_none(), "nothing measured yet");
        m.record_decode(1.0);
        m.record_verify(3, 1.3);
        for _ in 0..20 {
            m.record_outcome(3, 3);
        }
        let e = m.best(3).unwrap();
        assert_eq!(e.best_len, 3);
        assert!(e.gain > 2.0, "{e:?}");
        // Lengths never measured are interpolated from the decode and the nearest measured one.
        assert!((m.verify_secs(2).unwrap() - 1.2).abs() < 1e-12);
        // Expensive verification, drafts rejected: no length pays.
        let mut m = DraftModel::new(3);
        m.record_decode(1.0);
        m.record_verify(1, 2.0);
        for _ in 0..20 {
            m.record_outcome(1, 0);
        }
        assert!(m.acceptance() < 0.1);
        assert!(m.best(3).unwrap().gain < 1.0);
        // Acceptance follows the text: after many accepted drafts it recovers.
        for _ in 0..200 {
            m.record_outcome(3, 3);
        }
        assert!(m.acceptance() > 0.9);
    }
}
