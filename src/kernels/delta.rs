//! The gated delta rule of one value head over a sequence (the recurrence of `qwen35`'s
//! DeltaNet layers), as an entry of each path's table ([`Kernels::delta_rule`]): one algorithm
//! ([`delta_rule`]), compiled for each path's features. The portable x86 build has SSE2 only,
//! so its loops run four lanes at a time; the AVX2 and AVX-512 builds run eight (the dot
//! products' lanes) or sixteen (the row updates).
//! LLVM never reassociates float operations, so every build gives the same bits.

use super::Kernels;
use super::attention::dot_rows;

/// One value head's inputs over a sequence of `n` tokens.
#[derive(Clone, Copy)]
pub struct DeltaSeq<'a> {
    /// Token `t`'s row starts at `rows[t * stride]`.
    pub rows: &'a [f32],
    /// Floats per token in `rows`.
    pub stride: usize,
    /// Values per key (and per row of the state).
    pub dk: usize,
    /// Offset in a row of the head's query (`dk` values).
    pub q: usize,
    /// Offset of the key in a row.
    pub k: usize,
    /// Offset of the value in a row (as many values as the state has rows).
    pub v: usize,
    /// Token `t`'s state decay is `decay[t * gate_stride]`, its update strength
    /// `beta[t * gate_stride]`.
    pub decay: &'a [f32],
    /// See `decay`.
    pub beta: &'a [f32],
    /// Floats per token in `decay` and `beta`.
    pub gate_stride: usize,
    /// The output's scale, `1 / sqrt(dv)`.
    pub scale: f32,
}

/// A path's build of [`delta_rule`].
pub(crate) type DeltaRuleFn = fn(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]);

/// Rows of the state a step updates together: their sums' chains of adds overlap.
const ROWS: usize = 8;

/// Runs `seq` through one value head's state (`dv = state.len() / dk` rows of `dk`,
/// row-major) for `n = out.len() / dv` tokens, writing token `t`'s output to
/// `out[t * dv .. (t + 1) * dv]`. Per token: `S = decay S; d = (v - S k) beta;
/// S += d k^T; o = S q * scale` ([`dot`](super::attention::dot)'s order for both products).
/// Rows are independent, so decay, `S k`, update and `S q` run on eight rows at a time: the
/// state is read and written once per token, and the eight rows' chains of adds overlap.
///
/// The reference of every path's build ([`Kernels::delta_rule`]).
///
/// # Panics
/// If `seq` is shorter than the `n` tokens `out` asks for.
#[inline(always)]
pub fn delta_rule(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
    let dk = seq.dk;
    let dv = state.len() / dk;
    for (t, out) in out.chunks_exact_mut(dv).enumerate() {
        let row = &seq.rows[t * seq.stride..];
        let tok = Token {
            q: &row[seq.q..seq.q + dk],
            k: &row[seq.k..seq.k + dk],
            decay: seq.decay[t * seq.gate_stride],
            beta: seq.beta[t * seq.gate_stride],
            scale: seq.scale,
        };
        let v = &row[seq.v..seq.v + dv];
        let whole = dv - dv % ROWS;
        let (state_whole, state_tail) = state.split_at_mut(whole * dk);
        let groups = state_whole.chunks_exact_mut(ROWS * dk);
        for ((s, o), v) in groups
            .zip(out.chunks_exact_mut(ROWS))
            .zip(v.chunks_exact(ROWS))
        {
            tok.step::<ROWS>(s, v, o);
        }
        let tail = state_tail.chunks_exact_mut(dk).zip(&mut out[whole..]);
        for ((s, o), v) in tail.zip(&v[whole..]) {
            tok.step::<1>(s, std::slice::from_ref(v), std::slice::from_mut(o));
        }
    }
}

/// One token's inputs to a value head.
struct Token<'a> {
    q: &'a [f32],
    k: &'a [f32],
    decay: f32,
    beta: f32,
    scale: f32,
}

impl Token<'_> {
    /// The token's step on `R` rows of the state (`s`, `R * dk` values) with their values
    /// `v`, writing their outputs `o`.
    #[inline(always)]
    fn step<const R: usize>(&self, s: &mut [f32], v: &[f32], o: &mut [f32]) {
        let dk = self.k.len();
        s.iter_mut().for_each(|x| *x *= self.decay);
        let sk = dot_rows(rows::<R>(s, dk), self.k);
        for (r, srow) in s.chunks_exact_mut(dk).enumerate() {
            let d = (v[r] - sk[r]) * self.beta;
            srow.iter_mut()
                .zip(self.k)
                .for_each(|(x, &kk)| *x += kk * d);
        }
        let sq = dot_rows(rows::<R>(s, dk), self.q);
        for (o, sq) in o.iter_mut().zip(sq) {
            *o = sq * self.scale;
        }
    }
}

/// The `R` rows of `dk` values in `s`.
#[inline(always)]
fn rows<const R: usize>(s: &[f32], dk: usize) -> [&[f32]; R] {
    std::array::from_fn(|r| &s[r * dk..(r + 1) * dk])
}

impl Kernels {
    /// Runs `seq` through one value head's `state` ([`delta_rule`]): bit-identical to the
    /// reference on every path.
    pub fn delta_rule(&self, state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
        (self.act.delta_rule)(state, seq, out)
    }
}
