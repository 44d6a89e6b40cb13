//! The pair-merging loop both tokenizers share (llama.cpp's): symbols in a linked list, a
//! max-heap of adjacent pairs by priority (ties: leftmost), the best pair merged into its left
//! symbol until no pair has a priority. BPE ranks pairs by merge rank, SentencePiece by the
//! score of the merged token.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A piece of the text: `len` bytes from `start` (0 once merged into its left neighbour), with
/// its live neighbours.
#[derive(Clone, Copy)]
pub(super) struct Symbol {
    pub(super) start: usize,
    pub(super) len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Symbols of the consecutive pieces `(start, len)` of a text, linked in order.
pub(super) fn symbols(pieces: impl Iterator<Item = (usize, usize)>) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = pieces
        .enumerate()
        .map(|(i, (start, len))| Symbol {
            start,
            len,
            prev: i.checked_sub(1),
            next: Some(i + 1),
        })
        .collect();
    if let Some(last) = symbols.last_mut() {
        last.next = None;
    }
    symbols
}

struct Pair<P> {
    left: usize,
    right: usize,
    priority: P,
    size: usize,
}

impl<P: Ord> PartialEq for Pair<P> {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl<P: Ord> Eq for Pair<P> {}
impl<P: Ord> PartialOrd for Pair<P> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P: Ord> Ord for Pair<P> {
    /// Max-heap order: the highest priority first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.priority
            .cmp(&o.priority)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Merges adjacent symbols while `priority(left, right)` gives a pair one, best first, and
/// returns the final symbols in order.
pub(super) fn merge<P: Ord>(
    mut symbols: Vec<Symbol>,
    priority: impl Fn(&Symbol, &Symbol) -> Option<P>,
) -> impl Iterator<Item = Symbol> {
    let mut queue = BinaryHeap::new();
    let add = |queue: &mut BinaryHeap<Pair<P>>,
               symbols: &[Symbol],
               l: Option<usize>,
               r: Option<usize>| {
        let (Some(l), Some(r)) = (l, r) else { return };
        let (a, b) = (&symbols[l], &symbols[r]);
        if let Some(p) = priority(a, b) {
            queue.push(Pair {
                left: l,
                right: r,
                priority: p,
                size: a.len + b.len,
            });
        }
    };
    for i in 1..symbols.len() {
        add(&mut queue, &symbols, Some(i - 1), Some(i));
    }
    while let Some(pair) = queue.pop() {
        let (l, r) = (symbols[pair.left], symbols[pair.right]);
        // Stale entry: a side was merged away or grew since the pair was queued (symbols only
        // grow rightwards and stay adjacent, so adjacency plus size identifies the text).
        if l.len == 0 || r.len == 0 || l.next != Some(pair.right) || l.len + r.len != pair.size {
            continue;
        }
        symbols[pair.left].len += r.len;
        symbols[pair.right].len = 0;
        symbols[pair.left].next = r.next;
        if let Some(n) = r.next {
            symbols[n].prev = Some(pair.left);
        }
        let left = symbols[pair.left];
        add(&mut queue, &symbols, left.prev, Some(pair.left));
        add(&mut queue, &symbols, Some(pair.left), left.next);
    }
    let mut i = (!symbols.is_empty()).then_some(0);
    std::iter::from_fn(move || {
        let s = symbols[i?];
        i = s.next;
        Some(s)
    })
}
