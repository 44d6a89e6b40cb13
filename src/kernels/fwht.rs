//! The normalized Walsh-Hadamard transform of PrismML's rotated checkpoints, as an entry of each
//! path's table ([`Kernels::fwht_blocks`]): one algorithm ([`fwht_blocks`]), compiled for each
//! path's features, so every path gives the same bits.

use super::Kernels;

/// A path's build of [`fwht_blocks`].
pub(crate) type FwhtFn = fn(x: &mut [f32], block: usize);

/// In-place normalized Walsh-Hadamard transform (Sylvester order) of every block of `block`
/// consecutive values (`block` a power of two): butterflies `(u, w) -> (u + w, u - w)` at
/// distances 1, 2, 4, ... `block / 2`, then every value times `1 / sqrt(block)` (exact for
/// powers of 4).
///
/// The first three distances run on eight values at a time in registers, and the scale is
/// applied as the last butterflies write: a 1024-value block takes eight passes, not eleven.
/// Each value still goes through the same operations in the same order, so the bits are those
/// of the plain butterflies.
#[inline(always)]
pub fn fwht_blocks(x: &mut [f32], block: usize) {
    let scale = 1.0 / (block as f32).sqrt();
    for b in x.chunks_exact_mut(block) {
        let first = match block >= 8 {
            true => {
                for g in b.chunks_exact_mut(8) {
                    let g: &mut [f32; 8] = g.try_into().expect("8 values");
                    *g = fwht8(*g);
                }
                8
            }
            false => 1,
        };
        match first == block {
            true => b.iter_mut().for_each(|v| *v *= scale),
            false => butterflies(b, first, block, scale),
        }
    }
}

/// The butterflies at distances `from, 2 from, ..` below `to` over `b`, the last distance's
/// results multiplied by `scale`.
#[inline(always)]
fn butterflies(b: &mut [f32], from: usize, to: usize, scale: f32) {
    let mut h = from;
    while h < to {
        let last = 2 * h == to;
        for pair in b.chunks_exact_mut(2 * h) {
            let (lo, hi) = pair.split_at_mut(h);
            for (a, c) in lo.iter_mut().zip(hi.iter_mut()) {
                let (u, w) = (*a, *c);
                (*a, *c) = match last {
                    true => ((u + w) * scale, (u - w) * scale),
                    false => (u + w, u - w),
                };
            }
        }
        h *= 2;
    }
}

/// The butterflies at distances 1, 2 and 4 of eight values.
#[inline(always)]
fn fwht8(mut v: [f32; 8]) -> [f32; 8] {
    for h in [1, 2, 4] {
        let t = v;
        v = std::array::from_fn(|i| match i & h {
            0 => t[i] + t[i + h],
            _ => t[i - h] - t[i],
        });
    }
    v
}

impl Kernels {
    /// [`fwht_blocks`] on this path: the same bits on every path.
    pub fn fwht_blocks(&self, x: &mut [f32], block: usize) {
        (self.act.fwht)(x, block)
    }
}
