//! The per-token step every decoding loop is made of, written once: `run` and `chat`
//! ([`Decoder::generate`](super::generate::Decoder::generate)), the speculative decoder and the
//! server's scheduler all pick tokens here. [`TokenStep::draw`] applies the grammar's mask,
//! samples, records the token, lets the grammar accept it and says whether the generation ends
//! there; [`check_draft`] walks the logits of a pass over drafted tokens and keeps the drafts
//! that are the tokens drawn at their places.

use std::fmt;

use super::sample::{Sampler, TokenMask};

/// Why a generation ends at a token it drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// An end-of-generation token (reported, but neither evaluated nor shown to the grammar).
    EndOfGeneration,
    /// The grammar is complete: nothing but the end may follow.
    GrammarComplete,
}

/// A token [`TokenStep::draw`] drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drawn {
    /// The token.
    pub id: u32,
    /// Whether the generation ends with it.
    pub stop: Option<Stop>,
}

/// The grammar failed during a [`TokenStep::draw`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepError {
    /// Masking the logits failed: no token was drawn.
    Mask(String),
    /// The grammar refused the token drawn (which is recorded all the same).
    Accept(u32, String),
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepError::Mask(e) | StepError::Accept(_, e) => f.write_str(e),
        }
    }
}

/// The tokens of one generation so far (what the sampler's penalties read) and the buffer the
/// masked logits are written to, kept between tokens so that a step does not allocate.
#[derive(Clone, Debug)]
pub struct TokenStep {
    history: Vec<u32>,
    n_prompt: usize,
    masked: Vec<f32>,
}

impl TokenStep {
    /// A generation after `prompt`.
    pub fn new(prompt: &[u32]) -> TokenStep {
        TokenStep {
            history: prompt.to_vec(),
            n_prompt: prompt.len(),
            masked: Vec::new(),
        }
    }

    /// The prompt, then the tokens drawn.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// The tokens drawn.
    pub fn generated(&self) -> &[u32] {
        &self.history[self.n_prompt..]
    }

    /// Draws the next token from `logits`: the logits `mask` allows (all without one), sampled
    /// by `sampler` with this generation's history; the token joins the history, and unless
    /// `is_eog` says it ends the generation, `mask` accepts it.
    pub fn draw(
        &mut self,
        logits: &[f32],
        sampler: &mut Sampler,
        mut mask: Option<&mut (dyn TokenMask + '_)>,
        is_eog: impl Fn(u32) -> bool,
    ) -> Result<Drawn, StepError> {
        let id = match mask.as_deref_mut() {
            None => sampler.sample(logits, &self.history, self.n_prompt),
            Some(m) => {
                self.masked.clear();
                self.masked.extend_from_slice(logits);
                m.apply(&mut self.masked).map_err(StepError::Mask)?;
                sampler.sample(&self.masked, &self.history, self.n_prompt)
            }
        };
        self.history.push(id);
        let stop = match mask {
            _ if is_eog(id) => Some(Stop::EndOfGeneration),
            Some(m) => {
                m.accept(id).map_err(|e| StepError::Accept(id, e))?;
                m.is_finished().then_some(Stop::GrammarComplete)
            }
            None => None,
        };
        Ok(Drawn { id, stop })
    }
}

/// Checks drafted tokens against the logits of one pass over the pending token and `draft`
/// (`rows`: `draft.len() + 1` rows of `n_vocab`, row `j` the logits after `draft[..j]`): draws
/// a token from each row with `draw`, going on while the token drawn is the draft's at that
/// place. `draw` returns `None` when the generation ends at the token it drew. Returns how
/// many draft tokens were confirmed (the session keeps the pending token and those) and the
/// last token drawn, the new pending one (`None` when the generation ended, or `rows` held no
/// row past the draft).
pub fn check_draft(
    rows: &[f32],
    n_vocab: usize,
    draft: &[u32],
    mut draw: impl FnMut(&[f32]) -> Option<u32>,
) -> (usize, Option<u32>) {
    let mut accepted = 0;
    for row in rows.chunks_exact(n_vocab) {
        let id = draw(row);
        match id {
            Some(id) if draft.get(accepted) == Some(&id) => accepted += 1,
            _ => return (accepted, id),
        }
    }
    (accepted, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_is_kept_up_to_the_first_token_drawn_otherwise() {
        // Three rows whose argmax is 2, 0, 1.
        let rows = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        let argmax = |r: &[f32]| Some(crate::runner::sample::argmax(r));
        assert_eq!(check_draft(&rows, 3, &[2, 0], argmax), (2, Some(1)));
        assert_eq!(check_draft(&rows, 3, &[2, 1], argmax), (1, Some(0)));
        assert_eq!(check_draft(&rows, 3, &[0, 0], argmax), (0, Some(2)));
        assert_eq!(check_draft(&rows[..3], 3, &[], argmax), (0, Some(2)));
        // The generation ends at the second row: one draft token kept, nothing pending.
        let mut n = 0;
        let ends = |r: &[f32]| {
            n += 1;
            (n < 2).then(|| crate::runner::sample::argmax(r))
        };
        assert_eq!(check_draft(&rows, 3, &[2, 0], ends), (1, None));
    }
}
