//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): each pre-token word is mapped byte by byte
//! to GPT-2's visible characters, then the adjacent pair with the lowest merge rank is merged
//! until no ranked pair is left (ties: leftmost), as llama.cpp does.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::{Vocab, merge};

/// Merge ranks keyed by interned piece ids, so a lookup needs no allocation.
#[derive(Debug, Clone, Default)]
pub(super) struct Merges {
    pieces: HashMap<String, u32>,
    ranks: HashMap<(u32, u32), u32>,
}

impl Merges {
    /// Builds the table from `"left right"` strings; rank = position. The split is at the
    /// first space after the first byte (a merge may start with a literal space).
    pub(super) fn new(merges: &[String]) -> Merges {
        let mut m = Merges::default();
        for (rank, line) in merges.iter().enumerate() {
            let Some(pos) = line
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i)
            else {
                continue;
            };
            let l = m.intern(&line[..pos]);
            let r = m.intern(&line[pos + 1..]);
            // The first occurrence of a pair keeps its (lower) rank.
            m.ranks.entry((l, r)).or_insert(rank as u32);
        }
        m
    }

    fn intern(&mut self, s: &str) -> u32 {
        let n = self.pieces.len() as u32;
        *self.pieces.entry(s.to_string()).or_insert(n)
    }

    fn rank(&self, l: &str, r: &str) -> Option<u32> {
        let l = *self.pieces.get(l)?;
        let r = *self.pieces.get(r)?;
        self.ranks.get(&(l, r)).copied()
    }

    /// Number of merges kept.
    pub(super) fn len(&self) -> usize {
        self.ranks.len()
    }
}

/// Tokenizes one byte-level-encoded word and appends the ids to `out`.
pub(super) fn tokenize_word(vocab: &Vocab, merges: &Merges, word: &str, out: &mut Vec<u32>) {
    if word.is_empty() {
        return;
    }
    if vocab.ignore_merges
        && let Some(id) = vocab.token_id(word)
    {
        out.push(id);
        return;
    }
    let symbols = merge::symbols(word.char_indices().map(|(start, c)| (start, c.len_utf8())));
    let text = |s: &merge::Symbol| &word[s.start..s.start + s.len];
    // The lowest rank is the best pair.
    let pieces = merge::merge(symbols, |a, b| merges.rank(text(a), text(b)).map(Reverse));
    for sym in pieces {
        let piece = text(&sym);
        match vocab.token_id(piece) {
            Some(id) => out.push(id),
            // A final piece outside the vocabulary: llama.cpp looks up each byte of it as a
            // one-byte token, which only ASCII bytes can be; the rest are dropped.
            None => {
                for (j, b) in piece.bytes().enumerate() {
                    if b.is_ascii()
                        && let Some(id) = vocab.token_id(&piece[j..j + 1])
                    {
                        out.push(id);
                    }
                }
            }
        }
    }
}
