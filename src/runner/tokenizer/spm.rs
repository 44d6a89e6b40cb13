//! SentencePiece-style tokenization (`tokenizer.ggml.model = llama`) with llama.cpp's merge
//! algorithm: start from UTF-8 characters, repeatedly merge the adjacent pair whose
//! concatenation is the highest-scoring vocabulary token (ties: leftmost), and emit each final
//! piece as its token or, when it is not in the vocabulary, as byte tokens `<0xNN>`.

use super::{Vocab, merge};

/// A token score ordered by `total_cmp`, so hostile NaN scores cannot break the heap.
struct Score(f32);

impl PartialEq for Score {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for Score {}
impl PartialOrd for Score {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Score {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

fn utf8_len(first: u8) -> usize {
    // llama.cpp's table: continuation bytes (10xxxxxx) count as one-byte characters.
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4][(first >> 4) as usize]
}

/// Tokenizes `text` (spaces already replaced by `▁`) and appends the ids to `out`.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let bytes = text.as_bytes();
    let mut offs = 0;
    let chars = std::iter::from_fn(|| {
        let len = utf8_len(*bytes.get(offs)?).min(bytes.len() - offs);
        offs += len;
        Some((offs - len, len))
    });
    // The merged token with the highest score is the best pair.
    let pieces = merge::merge(merge::symbols(chars), |a, b| {
        let piece = text.get(a.start..b.start + b.len)?;
        vocab.token_id(piece).map(|id| Score(vocab.score(id)))
    });
    for sym in pieces {
        let piece = text.get(sym.start..sym.start + sym.len).unwrap_or("");
        // Every merged piece is a vocabulary token by construction, so only unmerged
        // characters can miss: those fall back to their bytes.
        match vocab.token_id(piece) {
            Some(id) => out.push(id),
            None => {
                for b in piece.bytes() {
                    if let Some(id) = vocab.byte_token(b) {
                        out.push(id);
                    }
                }
            }
        }
    }
}
