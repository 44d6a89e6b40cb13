//! Byte-level BPE (`tokenizer.ggml.model = gpt2`): each pre-token word is mapped byte by byte
//! to GPT-2's visible characters, then the adjacent pair with the lowest merge rank is merged
//! until no ranked pair is left (ties: leftmost), as llama.cpp does.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::Vocab;

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
    rank: u32,
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
    /// Max-heap order that pops the lowest rank first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        o.rank.cmp(&self.rank).then_with(|| o.left.cmp(&self.left))
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
    let mut symbols: Vec<Symbol> = Vec::new();
    for (i, (start, c)) in word.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            prev: i.checked_sub(1),
            next: (start + len < word.len()).then_some(i + 1),
        });
    }
    let text = |s: &Symbol| &word[s.start..s.start + s.len];
    let mut queue = BinaryHeap::new();
    let add =
        |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], l: Option<usize>, r: Option<usize>| {
            let (Some(l), Some(r)) = (l, r) else { return };
            let (a, b) = (&symbols[l], &symbols[r]);
            if let Some(rank) = merges.rank(text(a), text(b)) {
                queue.push(Bigram {
                    left: l,
                    right: r,
                    rank,
                    size: a.len + b.len,
                });
            }
        };
    for i in 1..symbols.len() {
        add(&mut queue, &symbols, Some(i - 1), Some(i));
    }
    while let Some(bg) = queue.pop() {
        let (l, r) = (symbols[bg.left], symbols[bg.right]);
        // Stale entry: a side was merged away or changed since the pair was queued (symbols
        // only grow rightwards and stay adjacent, so adjacency plus size identifies the text).
        if l.len == 0 || r.len == 0 || l.next != Some(bg.right) || l.len + r.len != bg.size {
            continue;
        }
        symbols[bg.left].len += r.len;
        symbols[bg.right].len = 0;
        symbols[bg.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(bg.left);
        }
        let left = symbols[bg.left];
        add(&mut queue, &symbols, left.prev, Some(bg.left));
        add(&mut queue, &symbols, Some(bg.left), left.next);
    }
    let mut i = Some(0);
    while let Some(s) = i {
        let sym = symbols[s];
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
        i = sym.next;
    }
}
