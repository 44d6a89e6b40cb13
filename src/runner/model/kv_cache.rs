//! The attention KV cache: per layer, `n_ctx` positions of K and V stored as IEEE half, like
//! llama.cpp's default (`-ctk f16 -ctv f16`) cache. Attention reads the halves directly
//! (converting eight at a time in registers, see `attention`), so the cache costs half the memory
//! and half the bandwidth of an f32 one. Truncation is O(1), which speculative decoding uses to
//! roll back.

use half::f16;
use half::slice::HalfFloatSliceExt;

/// K and V of every attention layer for one sequence.
#[derive(Clone)]
pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    k: Vec<Vec<f16>>,
    v: Vec<Vec<f16>>,
    len: usize,
}

impl KvCache {
    /// A cache for `n_layers` attention layers of `kv_dim` values per position.
    pub fn new(n_layers: usize, n_ctx: usize, kv_dim: usize) -> KvCache {
        let zero = || vec![f16::ZERO; n_ctx * kv_dim];
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

    /// Bytes held.
    pub fn size_bytes(&self) -> usize {
        2 * size_of::<f16>() * self.n_ctx * self.kv_dim * self.k.len()
    }

    /// Stores K and V of position `pos` in `layer`, rounding each value to the nearest half
    /// (ties to even, as ggml's f32 -> f16 conversion does).
    pub fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let span = pos * self.kv_dim..(pos + 1) * self.kv_dim;
        self.k[layer][span.clone()].convert_from_f32_slice(&k[..self.kv_dim]);
        self.v[layer][span].convert_from_f32_slice(&v[..self.kv_dim]);
    }

    /// K and V of `layer` for positions `0..n` (`n * kv_dim` halves each).
    pub fn layer(&self, layer: usize, n: usize) -> (&[f16], &[f16]) {
        (
            &self.k[layer][..n * self.kv_dim],
            &self.v[layer][..n * self.kv_dim],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_halves_rounded_to_nearest_and_halves_the_f32_size() {
        let mut c = KvCache::new(2, 3, 4);
        assert_eq!(c.size_bytes(), 2 * 2 * 2 * 3 * 4);
        let k = [1.0, 1.0 + 1.0 / 4096.0, 65504.0, -3.0e-8];
        let v = [0.1, -0.2, 1e-5, 7.0];
        c.store(1, 2, &k, &v);
        c.set_len(3);
        let (ks, vs) = c.layer(1, 3);
        for i in 0..4 {
            assert_eq!(ks[8 + i], f16::from_f32(k[i]));
            assert_eq!(vs[8 + i], f16::from_f32(v[i]));
        }
        // 1 + 2^-12 is halfway between two halves: ties go to the even one, 1.0.
        assert_eq!(ks[9].to_f32(), 1.0);
        assert!(c.layer(0, 3).0.iter().all(|h| *h == f16::ZERO));
    }
}
