//! SentencePiece-style tokenization (`tokenizer.ggml.model = llama`) with llama.cpp's merge
//! algorithm: start from UTF-8 characters, repeatedly merge the adjacent pair whose
//! concatenation is the highest-scoring vocabulary token (ties: leftmost), and emit each final
//! piece as its token or, when it is not in the vocabulary, as byte tokens `<0xNN>`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::Vocab;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair. `total_cmp` keeps hostile
    /// NaN scores from breaking the heap invariants.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

fn utf8_len(first: u8) -> usize {
    // llama.cpp's table: continuation bytes (10xxxxxx) count as one-byte characters.
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4][(first >> 4) as usize]
}

/// Tokenizes `text` (spaces already replaced by `▁`) and appends the ids to `out`.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    let bytes = text.as_bytes();
    let mut symbols: Vec<Symbol> = Vec::new();
    let mut offs = 0;
    while offs < bytes.len() {
        let len = utf8_len(bytes[offs]).min(bytes.len() - offs);
        let i = symbols.len();
        symbols.push(Symbol {
            start: offs,
            len,
            prev: i.checked_sub(1),
            next: (offs + len < bytes.len()).then_some(i + 1),
        });
        offs += len;
    }
    let mut queue = BinaryHeap::new();
    let try_add =
        |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], l: Option<usize>, r: Option<usize>| {
            let (Some(l), Some(r)) = (l, r) else { return };
            let (a, b) = (symbols[l], symbols[r]);
            let Some(piece) = text.get(a.start..b.start + b.len) else {
                return;
            };
            if let Some(id) = vocab.token_id(piece) {
                queue.push(Bigram {
                    left: l,
                    right: r,
                    score: vocab.score(id),
                    size: piece.len(),
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&mut queue, &symbols, Some(i - 1), Some(i));
    }
    while let Some(bg) = queue.pop() {
        let (l, r) = (symbols[bg.left], symbols[bg.right]);
        // Stale entry: one side was merged away or grew since the pair was queued.
        if l.len == 0 || r.len == 0 || l.len + r.len != bg.size {
            continue;
        }
        symbols[bg.left].len += r.len;
        symbols[bg.right].len = 0;
        symbols[bg.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(bg.left);
        }
        let left = symbols[bg.left];
        try_add(&mut queue, &symbols, left.prev, Some(bg.left));
        try_add(&mut queue, &symbols, Some(bg.left), left.next);
    }
    let mut i = if symbols.is_empty() { None } else { Some(0) };
    while let Some(s) = i {
        let sym = symbols[s];
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
        i = sym.next;
    }
}
