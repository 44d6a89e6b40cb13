//! The attention KV cache: per layer, `n_ctx` positions of K and V, rounded to f16 like
//! llama.cpp's default cache but held as f32, so attention reads them without a conversion per
//! query head (f16 -> f32 in software would dominate long prompts). Truncation is O(1), which
//! speculative decoding uses to roll back.

use super::ops::round_f16;

/// K and V of every attention layer for one sequence.
pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
}

impl KvCache {
    /// A cache for `n_layers` attention layers of `kv_dim` values per position.
    pub fn new(n_layers: usize, n_ctx: usize, kv_dim: usize) -> KvCache {
        let zero = || vec![0.0f32; n_ctx * kv_dim];
        KvCache {
            n_ctx,
            kv_dim,
            k: (0..n_layers).map(|_| zero()).collect(),
            v: (0..n_layers).map(|_| zero()).collect(),
            len: 0,
        }
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

    /// Forgets every position from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Marks positions up to `len` as filled (after a forward pass wrote them).
    pub(crate) fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.n_ctx);
        self.len = len;
    }

    /// Bytes held.
    pub fn size_bytes(&self) -> usize {
        2 * 4 * self.n_ctx * self.kv_dim * self.k.len()
    }

    /// Stores K and V of position `pos` in `layer` (rounding to f16).
    pub fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let span = pos * self.kv_dim..(pos + 1) * self.kv_dim;
        for (d, &s) in self.k[layer][span.clone()].iter_mut().zip(k) {
            *d = round_f16(s);
        }
        for (d, &s) in self.v[layer][span].iter_mut().zip(v) {
            *d = round_f16(s);
        }
    }

    /// K and V of `layer` for positions `0..n` (`n * kv_dim` values each).
    pub fn layer(&self, layer: usize, n: usize) -> (&[f32], &[f32]) {
        (
            &self.k[layer][..n * self.kv_dim],
            &self.v[layer][..n * self.kv_dim],
        )
    }
}
