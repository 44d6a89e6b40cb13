//! The gated delta rule of one value head over a sequence (the recurrence of `qwen35`'s
//! DeltaNet layers), as an entry of each path's table ([`Kernels::delta_rule`]): one algorithm
//! ([`delta_rule`]), compiled for each path's features. Its vectors are 16 value rows: one
//! register on AVX-512, two on AVX2, four on the portable x86 build (SSE2) and on NEON.
//! LLVM never reassociates float operations, so every build gives the same bits.

use super::Kernels;

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

/// Value rows a step computes side by side: the lanes of its vectors (one zmm, two ymm).
pub const LANES: usize = 16;

/// Chains of each of a step's sums: key component `j` goes to chain `j % CHAINS`, as it goes
/// to lane `j % 8` of [`dot_rows`](super::attention::dot_rows), so the sums come out in
/// `dot`'s order.
const CHAINS: usize = 8;

/// Runs `seq` through one value head's state for `n = out.len() / dv` tokens, writing token
/// `t`'s output to `out[t * dv .. (t + 1) * dv]`. Per token: `S = decay S; d = (v - S k) beta;
/// S += d k^T; o = S q * scale`, both products in [`dot`](super::attention::dot)'s order.
///
/// **State layout.** `S` (`dv` value rows of `dk`) lies in blocks of [`LANES`] value rows, each
/// block transposed: block `r0 .. r0 + 16` is the `16 * dk` values from `r0 * dk`, value
/// `S[r0 + i][j]` at `r0 * dk + 16 j + i`. The `dv % 16` rows past the last whole block lie
/// as they are (`S[r][j]` at `r * dk + j`: blocks of one row). [`state_index`] says where each
/// value lies.
///
/// Value rows never mix, so the head runs block by block, each block through every token of
/// the batch while its state (8 KiB at `dk = 128`) stays in L1. A block's rows are the lanes
/// of its vectors, so each sum is a vertical add (its eight chains are `dot`'s eight lanes,
/// added in `dot`'s order at the end) and a token is two passes over the block: decay and
/// `S k`, then the update and `S q`.
///
/// The reference of every path's build ([`Kernels::delta_rule`]).
///
/// # Panics
/// If `seq` is shorter than the `n` tokens `out` asks for.
#[inline(always)]
pub fn delta_rule(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
    let dk = seq.dk;
    let dv = state.len() / dk;
    let whole = dv - dv % LANES;
    let (blocks, rest) = state[..dv * dk].split_at_mut(whole * dk);
    for (b, block) in blocks.chunks_exact_mut(LANES * dk).enumerate() {
        rows_through_batch::<LANES>(block, dv, LANES * b, seq, out);
    }
    for (i, row) in rest.chunks_exact_mut(dk).enumerate() {
        rows_through_batch::<1>(row, dv, whole + i, seq, out);
    }
}

/// Where [`delta_rule`] keeps `S[r][j]` of a head of `dv` value rows of `dk`.
pub fn state_index(r: usize, j: usize, dv: usize, dk: usize) -> usize {
    match r < dv - dv % LANES {
        true => (r - r % LANES) * dk + LANES * j + r % LANES,
        false => r * dk + j,
    }
}

/// The block of value rows `r0 .. r0 + L` (`L * dk` values, [`delta_rule`]'s layout) of a
/// head of `dv` rows through every token of `seq`.
#[inline(always)]
fn rows_through_batch<const L: usize>(
    block: &mut [f32],
    dv: usize,
    r0: usize,
    seq: &DeltaSeq<'_>,
    out: &mut [f32],
) {
    let dk = seq.dk;
    for (t, out) in out.chunks_exact_mut(dv).enumerate() {
        let row = &seq.rows[t * seq.stride..];
        let tok = Token {
            q: &row[seq.q..seq.q + dk],
            k: &row[seq.k..seq.k + dk],
            decay: seq.decay[t * seq.gate_stride],
            beta: seq.beta[t * seq.gate_stride],
            scale: seq.scale,
        };
        let v: &[f32; L] = row[seq.v + r0..][..L].try_into().expect("L values");
        let o: &mut [f32; L] = (&mut out[r0..r0 + L]).try_into().expect("L outputs");
        tok.step(block, v, o);
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
    /// The token's step on a block of `L` value rows (`L * dk` values, [`delta_rule`]'s
    /// layout) with their values `v`, writing their outputs `o`.
    #[inline(always)]
    fn step<const L: usize>(&self, block: &mut [f32], v: &[f32; L], o: &mut [f32; L]) {
        let (k, decay) = (self.k, self.decay);
        let sk = column_sums::<L>(block, k, |_, s| {
            s.iter_mut().for_each(|x| *x *= decay);
        });
        let d: [f32; L] = std::array::from_fn(|i| (v[i] - sk[i]) * self.beta);
        let sq = column_sums::<L>(block, self.q, |j, s| {
            s.iter_mut().zip(&d).for_each(|(x, &di)| *x += k[j] * di);
        });
        *o = std::array::from_fn(|i| sq[i] * self.scale);
    }
}

/// For every key component `j`, `update(j, s)` on the block's `L` values `s` of component `j`,
/// then `s * b[j]` added to chain `j % CHAINS`: each lane's sum is then the
/// [`dot_rows`](super::attention::dot_rows) of its updated state row and `b`, bit for bit
/// (chains in `dot`'s lane order, the components past the last whole eight after them).
#[inline(always)]
fn column_sums<const L: usize>(
    block: &mut [f32],
    b: &[f32],
    mut update: impl FnMut(usize, &mut [f32; L]),
) -> [f32; L] {
    let whole = b.len() - b.len() % CHAINS;
    let mut acc = [[0.0f32; L]; CHAINS];
    for (c, bc) in b[..whole].chunks_exact(CHAINS).enumerate() {
        for (ch, (a, &bj)) in acc.iter_mut().zip(bc).enumerate() {
            let j = CHAINS * c + ch;
            let s = state_row::<L>(block, j);
            update(j, s);
            *a = std::array::from_fn(|i| a[i] + s[i] * bj);
        }
    }
    let mut sum = acc[0];
    for a in &acc[1..] {
        sum = std::array::from_fn(|i| sum[i] + a[i]);
    }
    for (j, &bj) in b.iter().enumerate().skip(whole) {
        let s = state_row::<L>(block, j);
        update(j, s);
        sum = std::array::from_fn(|i| sum[i] + s[i] * bj);
    }
    sum
}
impl Kernels {
    /// Runs `seq` through one value head's `state` ([`delta_rule`]): bit-identical to the
    /// reference on every path.
    pub fn delta_rule(&self, state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
        (self.act.delta_rule)(state, seq, out)
    }
}

/// Row `j` of a block of `L` value rows: its `L` values of key component `j`.
#[inline(always)]
fn state_row<const L: usize>(block: &mut [f32], j: usize) -> &mut [f32; L] {
    (&mut block[L * j..L * j + L]).try_into().expect("L values")
}
