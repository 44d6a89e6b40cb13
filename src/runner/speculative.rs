//! Speculative decoding with prompt-lookup drafts: guess the next tokens by finding the current
//! suffix earlier in the context, verify the guesses in one forward pass (a batch of 2-4 columns
//! is one padded gemm tile, so the weights are read once), keep the longest prefix greedy agrees
//! with, and roll the rest back. Under greedy sampling the output is identical to plain greedy:
//! every kernel gives bit-identical results whatever the batch width.

use std::time::Instant;

use super::generate::{GenStats, prefill};
use super::model::{Exec, Model, Result, Session};
use super::sample::argmax;

/// Prompt-lookup drafter settings.
#[derive(Clone, Copy, Debug)]
pub struct LookupConfig {
    /// Longest suffix n-gram searched for.
    pub max_ngram: usize,
    /// Shortest suffix n-gram accepted as a match.
    pub min_ngram: usize,
    /// Most tokens drafted at once. 3 keeps a verification batch within one 4-column tile.
    pub max_draft: usize,
}

impl Default for LookupConfig {
    fn default() -> Self {
        LookupConfig {
            max_ngram: 3,
            min_ngram: 1,
            max_draft: 3,
        }
    }
}

/// Proposes up to `max` tokens: those that followed the most recent earlier occurrence of the
/// longest suffix of `context` (between `min_ngram` and `max_ngram` tokens long).
pub fn lookup_draft(context: &[u32], cfg: &LookupConfig, max: usize) -> Vec<u32> {
    let n = context.len();
    for len in (cfg.min_ngram.max(1)..=cfg.max_ngram.min(n.saturating_sub(1))).rev() {
        let suffix = &context[n - len..];
        // The most recent earlier occurrence wins (recent text predicts best).
        if let Some(start) = (0..n - len).rev().find(|&s| &context[s..s + len] == suffix) {
            let from = start + len;
            return context[from..(from + max).min(n)].to_vec();
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
}

impl DraftStats {
    /// Accepted / drafted.
    pub fn acceptance(&self) -> f64 {
        self.accepted as f64 / self.drafted.max(1) as f64
    }
}

/// Greedy generation of up to `n` tokens with prompt-lookup drafting; `on_token` as in
/// [`super::generate::generate`]. Produces exactly the tokens plain greedy would.
#[allow(clippy::too_many_arguments)]
pub fn generate_lookup(
    model: &Model,
    exec: &Exec,
    session: &mut Session,
    prompt: &[u32],
    n: usize,
    n_batch: usize,
    cfg: &LookupConfig,
    is_eog: impl Fn(u32) -> bool,
    on_token: impl FnMut(u32) -> bool,
) -> Result<(GenStats, DraftStats)> {
    let drafter = |context: &[u32], max: usize| lookup_draft(context, cfg, max);
    generate_drafted(
        model,
        exec,
        session,
        prompt,
        n,
        n_batch,
        cfg.max_draft,
        drafter,
        is_eog,
        on_token,
    )
}

/// Greedy generation with any drafter: `draft(context, max)` proposes up to `max` tokens to
/// follow `context` (prompt and tokens so far). The draft length adapts: it grows by one after
/// a fully accepted draft (up to `max_draft`) and drops to one past the accepted prefix otherwise.
#[allow(clippy::too_many_arguments)]
pub fn generate_drafted(
    model: &Model,
    exec: &Exec,
    session: &mut Session,
    prompt: &[u32],
    n: usize,
    n_batch: usize,
    max_draft: usize,
    mut draft_fn: impl FnMut(&[u32], usize) -> Vec<u32>,
    is_eog: impl Fn(u32) -> bool,
    mut on_token: impl FnMut(u32) -> bool,
) -> Result<(GenStats, DraftStats)> {
    let mut stats = GenStats {
        prompt_tokens: prompt.len(),
        ..Default::default()
    };
    let mut draft_stats = DraftStats::default();
    let t0 = Instant::now();
    let logits = prefill(model, exec, session, prompt, n_batch)?;
    stats.prompt_secs = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut context = prompt.to_vec();
    let mut next = argmax(&logits);
    let max_draft = max_draft.max(1);
    let mut draft_len = max_draft;
    // Emits `id`; returns false when generation must stop.
    let mut emit = |id: u32, context: &mut Vec<u32>, stats: &mut GenStats| {
        context.push(id);
        stats.gen_tokens += 1;
        on_token(id) && !is_eog(id) && stats.gen_tokens < n
    };
    if n == 0 {
        return Ok((stats, draft_stats));
    }
    if !emit(next, &mut context, &mut stats) {
        stats.gen_secs = t1.elapsed().as_secs_f64();
        return Ok((stats, draft_stats));
    }
    loop {
        let budget = (n - stats.gen_tokens).min(draft_len);
        let mut draft = if budget > 0 {
            draft_fn(&context, budget)
        } else {
            Vec::new()
        };
        draft.truncate(budget);
        if draft.is_empty() {
            next = argmax(&model.forward(exec, session, &[next], false)?);
            if !emit(next, &mut context, &mut stats) {
                break;
            }
            continue;
        }
        let base = session.len();
        let checkpoint = session.checkpoint();
        let mut batch = Vec::with_capacity(draft.len() + 1);
        batch.push(next);
        batch.extend(&draft);
        let rows = model.forward(exec, session, &batch, true)?;
        let nv = model.n_vocab();
        let row = |i: usize| &rows[i * nv..(i + 1) * nv];
        let accepted = draft
            .iter()
            .enumerate()
            .take_while(|&(i, &d)| argmax(row(i)) == d)
            .count();
        draft_stats.drafted += draft.len();
        draft_stats.accepted += accepted;
        draft_stats.verifications += 1;
        // Keep `next` and the accepted draft tokens in the state; drop the rest. The KV cache
        // truncates; a recurrent state returns to the checkpoint and replays what was kept.
        if accepted < draft.len() {
            if session.recurrent.is_some() {
                session.rollback(&checkpoint)?;
                model.forward(exec, session, &batch[..accepted + 1], false)?;
            } else {
                session.truncate(base + accepted + 1);
            }
        }
        draft_len = if accepted == draft.len() {
            (draft_len + 1).min(max_draft)
        } else {
            (accepted + 1).max(1)
        };
        let mut stop = false;
        for &d in &draft[..accepted] {
            if !emit(d, &mut context, &mut stats) {
                stop = true;
                break;
            }
        }
        if stop {
            break;
        }
        next = argmax(row(accepted));
        if !emit(next, &mut context, &mut stats) {
            break;
        }
    }
    stats.gen_secs = t1.elapsed().as_secs_f64();
    Ok((stats, draft_stats))
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
        assert!(lookup_draft(&[], &cfg, 3).is_empty());
    }
}
