//! The attention KV cache: per layer, up to `n_ctx` positions of K and V stored as IEEE half,
//! like llama.cpp's default (`-ctk f16 -ctv f16`) cache. Memory follows the positions a
//! sequence reaches, not its `n_ctx`: the buffers start empty and double (from
//! [`MIN_POSITIONS`]) before a pass that needs more, so a server slot holding a short
//! conversation holds a short cache, and a fresh session costs nothing to make. Attention
//! reads the halves directly (converting eight at a time in registers, see `attend`), so the
//! cache costs half the memory and half the bandwidth of an f32 one. Truncation is O(1), which
//! speculative decoding uses to roll back.
//!
//! **Head-major.** A layer's buffer holds each KV head's positions one after another
//! (`[head][position][head_dim]`), so the attention for one head reads one contiguous run,
//! `head_dim` values a row, which the hardware prefetchers follow. Position-major rows would
//! give each head a few cache lines out of every `kv_dim` values: at a depth of 4096 a decode
//! then read its cache at about half the memory's speed. Growing the buffers therefore moves
//! each head's rows to its new place (amortized over the doublings).
//!
//! A cache can also hold f32 ([`KvCache::new_f32`]): the exact semantics the float references
//! of the BitNet models assume, where the f16 rounding of K and V would flip int8 activation
//! roundings downstream (portable loops, for checking numerics rather than speed).

use half::f16;
use half::slice::HalfFloatSliceExt;

/// Positions a cache holds room for at least once it holds any.
pub const MIN_POSITIONS: usize = 256;

/// K and V of every attention layer for one sequence.
#[derive(Clone)]
pub struct KvCache {
    n_ctx: usize,
    /// Most positions the buffers may grow to (`n_ctx` unless a server slot caps it to what
    /// its request can reach).
    growth_cap: usize,
    kv_dim: usize,
    /// KV heads (`kv_dim / head_dim`): the blocks of a layer's buffer.
    heads: usize,
    head_dim: usize,
    k: Vec<KvBuf>,
    v: Vec<KvBuf>,
    len: usize,
}

/// One layer's K or V values.
#[derive(Clone)]
enum KvBuf {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl KvBuf {
    fn len(&self) -> usize {
        match self {
            KvBuf::F16(b) => b.len(),
            KvBuf::F32(b) => b.len(),
        }
    }

    /// Grows (or shrinks) to `n` values. On 4 KiB pages, unlike the weights: on huge pages the
    /// 1.7B's tg32 at depth 4096 spent a median 576 ms in attention against 529 on 4 KiB pages
    /// (Zen 4, six runs each), and decoded no faster (README, issue 41).
    fn resize(&mut self, n: usize) {
        fn grow<T: Copy>(b: &mut Vec<T>, n: usize, zero: T) {
            b.resize(n, zero);
        }
        match self {
            KvBuf::F16(b) => grow(b, n, f16::ZERO),
            KvBuf::F32(b) => grow(b, n, 0.0),
        }
    }

    /// Changes the rows each of `heads` head blocks holds from `from` to `to`, keeping the first
    /// `keep` rows of every head (of `row` values each) and zeroing the rest: the buffer grows
    /// first and the blocks move back to front, or the blocks move front to back and the buffer
    /// shrinks after, so no block is overwritten before it has moved.
    fn relayout(&mut self, heads: usize, row: usize, from: usize, to: usize, keep: usize) {
        fn move_heads<T: Copy>(
            b: &mut [T],
            heads: usize,
            row: usize,
            [from, to, keep]: [usize; 3],
            zero: T,
        ) {
            let block = |h: usize, rows: usize| h * rows * row;
            let keep = keep.min(from).min(to) * row;
            let mut move_head = |h: usize| {
                let (src, dst) = (block(h, from), block(h, to));
                b.copy_within(src..src + keep, dst);
                b[dst + keep..dst + to * row].fill(zero);
            };
            match to > from {
                true => (0..heads).rev().for_each(&mut move_head),
                false => (0..heads).for_each(&mut move_head),
            }
        }
        if to > from {
            self.resize(heads * to * row);
        }
        let rows = [from, to, keep];
        match self {
            KvBuf::F16(b) => move_heads(b, heads, row, rows, f16::ZERO),
            KvBuf::F32(b) => move_heads(b, heads, row, rows, 0.0),
        }
        if to < from {
            match self {
                KvBuf::F16(b) => {
                    b.truncate(heads * to * row);
                    b.shrink_to_fit();
                }
                KvBuf::F32(b) => {
                    b.truncate(heads * to * row);
                    b.shrink_to_fit();
                }
            }
        }
    }

    fn value_bytes(&self) -> usize {
        match self {
            KvBuf::F16(_) => size_of::<f16>(),
            KvBuf::F32(_) => size_of::<f32>(),
        }
    }

    /// Stores `src` at `span` (f16: rounded to nearest, ties to even, as ggml converts).
    fn store(&mut self, span: std::ops::Range<usize>, src: &[f32]) {
        match self {
            KvBuf::F16(b) => b[span].convert_from_f32_slice(src),
            KvBuf::F32(b) => b[span].copy_from_slice(src),
        }
    }

    fn rows(&self, span: std::ops::Range<usize>) -> KvRows<'_> {
        match self {
            KvBuf::F16(b) => KvRows::F16(&b[span]),
            KvBuf::F32(b) => KvRows::F32(&b[span]),
        }
    }
}

/// K or V values of one layer as the cache holds them.
#[derive(Clone, Copy, Debug)]
pub enum KvRows<'a> {
    /// IEEE halves (the default cache).
    F16(&'a [f16]),
    /// f32 ([`KvCache::new_f32`]).
    F32(&'a [f32]),
}

impl KvCache {
    /// A cache for `n_layers` attention layers of `heads` KV heads of `head_dim` values per
    /// position. Allocates nothing until a forward pass reserves its positions.
    pub fn new(n_layers: usize, n_ctx: usize, heads: usize, head_dim: usize) -> KvCache {
        Self::with_bufs(n_layers, n_ctx, [heads, head_dim], KvBuf::F16(Vec::new()))
    }

    /// As [`KvCache::new`], holding f32 values (twice the memory, no rounding).
    pub fn new_f32(n_layers: usize, n_ctx: usize, heads: usize, head_dim: usize) -> KvCache {
        Self::with_bufs(n_layers, n_ctx, [heads, head_dim], KvBuf::F32(Vec::new()))
    }

    fn with_bufs(
        n_layers: usize,
        n_ctx: usize,
        [heads, head_dim]: [usize; 2],
        empty: KvBuf,
    ) -> KvCache {
        KvCache {
            n_ctx,
            growth_cap: n_ctx,
            kv_dim: heads * head_dim,
            heads,
            head_dim,
            k: vec![empty.clone(); n_layers],
            v: vec![empty; n_layers],
            len: 0,
        }
    }

    /// Makes room for positions `0..n` (`n <= n_ctx`): each layer's buffers double (at least
    /// to 256 positions, at most to `n_ctx`) when `n` is past them, so a sequence that
    /// grows token by token reallocates `log2(n / 256)` times.
    pub fn reserve(&mut self, n: usize) {
        let held = self.positions();
        if n <= held {
            return;
        }
        let cap = self.growth_cap.min(self.n_ctx);
        let positions = n.max(2 * held).max(MIN_POSITIONS).min(cap).max(n);
        self.relayout(positions, held);
    }

    /// Gives every head block `positions` rows, keeping the first `keep`.
    fn relayout(&mut self, positions: usize, keep: usize) {
        let (heads, hd, held) = (self.heads, self.head_dim, self.positions());
        for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
            buf.relayout(heads, hd, held, positions, keep);
        }
    }

    /// A copy holding only the filled positions (the buffers cut to `len` rows, and free to
    /// grow to `n_ctx` again): what a prompt cache keeps of a sequence.
    pub fn compact(&self) -> KvCache {
        self.compact_prefix(self.len)
    }

    /// [`compact`](Self::compact) of the first `n` filled positions only.
    pub fn compact_prefix(&self, n: usize) -> KvCache {
        let len = n.min(self.len);
        let (held, hd) = (self.positions(), self.head_dim);
        fn heads<T: Copy>(v: &[T], held: usize, keep: usize) -> Vec<T> {
            match held {
                0 => Vec::new(),
                _ => v
                    .chunks_exact(held)
                    .flat_map(|b| &b[..keep])
                    .copied()
                    .collect(),
            }
        }
        let (held, keep) = (held * hd, len * hd);
        let cut = |b: &KvBuf| match b {
            KvBuf::F16(v) => KvBuf::F16(heads(v, held, keep)),
            KvBuf::F32(v) => KvBuf::F32(heads(v, held, keep)),
        };
        KvCache {
            n_ctx: self.n_ctx,
            growth_cap: self.n_ctx,
            kv_dim: self.kv_dim,
            heads: self.heads,
            head_dim: self.head_dim,
            k: self.k.iter().map(cut).collect(),
            v: self.v.iter().map(cut).collect(),
            len,
        }
    }

    /// Gives back the room past the filled positions (without copying them where the
    /// allocator can shrink in place) and lifts the growth cap: what [`compact`](Self::compact)
    /// leaves, for a cache that is moved rather than copied.
    pub fn shrink_to_len(&mut self) {
        if self.len < self.positions() {
            self.relayout(self.len, self.len);
        }
        self.growth_cap = self.n_ctx;
    }

    /// Positions the buffers hold room for now.
    pub fn positions(&self) -> usize {
        self.k.first().map_or(0, KvBuf::len) / self.kv_dim.max(1)
    }

    /// Caps how far the buffers may grow (at least what they hold and what is asked): a
    /// server slot sets it to the positions its request can reach, so that the memory it
    /// takes is what the scheduler's budget counted.
    pub fn cap_growth(&mut self, positions: usize) {
        self.growth_cap = positions;
    }

    /// Positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Values per position (K or V) in one layer.
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Marks positions up to `len` as filled (after a forward pass wrote them).
    pub(crate) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.n_ctx);
        self.len = len;
    }

    /// Bytes held now (the positions reserved so far).
    pub fn size_bytes(&self) -> usize {
        self.k
            .iter()
            .chain(&self.v)
            .map(|b| b.len() * b.value_bytes())
            .sum()
    }

    /// Bytes one position takes (K and V of every layer).
    pub fn bytes_per_position(&self) -> usize {
        let value = self.k.first().map_or(size_of::<f16>(), KvBuf::value_bytes);
        2 * value * self.kv_dim * self.k.len()
    }

    /// Stores K and V of position `pos` in `layer`, rounding each value to the nearest half
    /// (ties to even, as ggml's f32 -> f16 conversion does) unless the cache holds f32.
    pub fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (hd, held) = (self.head_dim, self.positions());
        let heads = k[..self.kv_dim].chunks_exact(hd).zip(v.chunks_exact(hd));
        for (h, (k, v)) in heads.enumerate() {
            let at = (h * held + pos) * hd;
            self.k[layer].store(at..at + hd, k);
            self.v[layer].store(at..at + hd, v);
        }
    }

    /// K and V of KV head `head` of `layer` for positions `0..n`: `n` rows of `head_dim`
    /// values each, one after another.
    pub fn head(&self, layer: usize, head: usize, n: usize) -> (KvRows<'_>, KvRows<'_>) {
        let at = head * self.positions() * self.head_dim;
        let rows = at..at + n * self.head_dim;
        (self.k[layer].rows(rows.clone()), self.v[layer].rows(rows))
    }

    /// Whether the cache holds IEEE halves (not f32).
    pub fn is_f16(&self) -> bool {
        matches!(self.k.first(), None | Some(KvBuf::F16(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_halves_rounded_to_nearest_and_halves_the_f32_size() {
        let mut c = KvCache::new(2, 3, 2, 2);
        assert_eq!((c.size_bytes(), c.bytes_per_position()), (0, 2 * 2 * 2 * 4));
        c.reserve(3);
        assert_eq!(c.size_bytes(), 2 * 2 * 2 * 3 * 4, "capped at n_ctx");
        let k = [1.0, 1.0 + 1.0 / 4096.0, 65504.0, -3.0e-8];
        let v = [0.1, -0.2, 1e-5, 7.0];
        c.store(1, 2, &k, &v);
        c.set_len(3);
        for h in 0..2 {
            let (KvRows::F16(ks), KvRows::F16(vs)) = c.head(1, h, 3) else {
                panic!("an f16 cache")
            };
            for i in 0..2 {
                assert_eq!(ks[4 + i], f16::from_f32(k[2 * h + i]));
                assert_eq!(vs[4 + i], f16::from_f32(v[2 * h + i]));
            }
        }
        // 1 + 2^-12 is halfway between two halves: ties go to the even one, 1.0.
        let KvRows::F16(k0) = c.head(1, 0, 3).0 else {
            panic!("an f16 cache")
        };
        assert_eq!(k0[5].to_f32(), 1.0);
        let KvRows::F16(k0) = c.head(0, 1, 3).0 else {
            panic!("an f16 cache")
        };
        assert!(k0.iter().all(|h| *h == f16::ZERO));
        // An f32 cache keeps the values and takes twice the bytes.
        let mut c = KvCache::new_f32(2, 3, 2, 2);
        c.reserve(3);
        assert_eq!(c.size_bytes(), 2 * 2 * 4 * 3 * 4);
        assert_eq!(c.bytes_per_position(), 2 * 4 * 2 * 4);
        c.store(1, 2, &k, &v);
        let (KvRows::F32(ks), KvRows::F32(vs)) = c.head(1, 1, 3) else {
            panic!("an f32 cache")
        };
        assert_eq!((&ks[4..6], &vs[4..6]), (&k[2..], &v[2..]));
    }

    /// Every position of every head reads back what was stored through growth, a compact copy
    /// of a prefix and a shrink in place, each head's rows one after another.
    #[test]
    fn heads_keep_their_rows_through_growth_copies_and_shrinking() {
        let (heads, hd) = (3, 4);
        let value = |layer: usize, pos: usize, i: usize| (1000 * layer + 10 * pos + i) as f32;
        let check = |c: &KvCache, n: usize| {
            for layer in 0..2 {
                for h in 0..heads {
                    let (KvRows::F32(k), KvRows::F32(v)) = c.head(layer, h, n) else {
                        panic!("an f32 cache")
                    };
                    for p in 0..n {
                        for i in 0..hd {
                            let want = value(layer, p, h * hd + i);
                            assert_eq!(k[p * hd + i], want, "K layer {layer} head {h} pos {p}");
                            assert_eq!(v[p * hd + i], -want, "V layer {layer} head {h} pos {p}");
                        }
                    }
                }
            }
        };
        let mut c = KvCache::new_f32(2, 2000, heads, hd);
        let mut filled = 0;
        for n in [1, 200, MIN_POSITIONS + 1, 700, 1500] {
            c.reserve(n);
            for layer in 0..2 {
                for p in filled..n {
                    let k: Vec<f32> = (0..heads * hd).map(|i| value(layer, p, i)).collect();
                    let v: Vec<f32> = k.iter().map(|x| -x).collect();
                    c.store(layer, p, &k, &v);
                }
            }
            c.set_len(n);
            filled = n;
            check(&c, n);
        }
        let copy = c.compact_prefix(600);
        assert_eq!((copy.len(), copy.positions()), (600, 600));
        check(&copy, 600);
        c.truncate(900);
        c.shrink_to_len();
        assert_eq!(c.positions(), 900);
        check(&c, 900);
        c.reserve(1200);
        check(&c, 900);
    }

    #[test]
    fn a_growth_cap_stops_the_doubling_where_the_request_ends() {
        let mut c = KvCache::new(1, 10_000, 1, 2);
        c.cap_growth(300);
        c.reserve(1);
        assert_eq!(c.positions(), MIN_POSITIONS);
        c.reserve(MIN_POSITIONS + 1);
        assert_eq!(c.positions(), 300, "doubling stops at the cap");
        c.reserve(400);
        assert_eq!(c.positions(), 400, "what is asked is always held");
    }

    #[test]
    fn buffers_follow_the_positions_reached() {
        let mut c = KvCache::new(1, 10_000, 1, 2);
        c.reserve(1);
        assert_eq!(c.size_bytes(), 2 * 2 * 2 * MIN_POSITIONS);
        c.reserve(MIN_POSITIONS);
        assert_eq!(
            c.size_bytes(),
            2 * 2 * 2 * MIN_POSITIONS,
            "no growth within what is held"
        );
        c.reserve(MIN_POSITIONS + 1);
        assert_eq!(c.size_bytes(), 2 * 2 * 2 * 2 * MIN_POSITIONS, "doubles");
        c.reserve(9_000);
        assert_eq!(
            c.size_bytes(),
            2 * 2 * 2 * 9_000,
            "to what is needed when more than double"
        );
        c.reserve(9_500);
        assert_eq!(c.size_bytes(), 2 * 2 * 2 * 10_000, "capped at n_ctx");
        c.store(0, 9_999, &[1.0, 2.0], &[3.0, 4.0]);
        c.set_len(10_000);
        let KvRows::F16(v) = c.head(0, 0, 10_000).1 else {
            panic!("an f16 cache")
        };
        assert_eq!(v[19_999], f16::from_f32(4.0));
    }
}
