//! The blocks a layer is made of, each written once for every architecture: a layer is
//! `x += mixer(norm(x)); x += ffn(norm(x))`, the mixer attention or Gated DeltaNet.

mod attention;
mod deltanet;
mod ffn;

pub(crate) use attention::Attention;
pub(crate) use deltanet::DeltaNet;
pub(crate) use ffn::Ffn;

use super::Seq;
use super::batch::MatmulScratch;
use super::error::Result;
use super::exec::Exec;
use super::hadamard::HadamardFold;
use super::hparams::HParams;
use super::linear::{Activations, dense_step, run_step};
use super::profile::Phase;
use super::weights::{InputKind, Projection};
use crate::matmul::{Matrix, T2pProduct};

/// The sequences of a batch: each session with the tokens it runs.
pub(crate) type Seqs<'a> = [Seq<'a>];

/// What every block of a forward pass reads besides its weights and the batch workspace.
pub(crate) struct Ctx<'a> {
    /// Kernels, pool, activation type, profile.
    pub exec: &'a Exec,
    /// Hyper-parameters.
    pub hp: &'a HParams,
    /// The Hadamard fold, if the checkpoint has one.
    pub fold: Option<&'a HadamardFold>,
    /// Round activations to bf16 before BF16 weights.
    pub round_bf16: bool,
}

/// One decoder layer.
pub(crate) struct Layer {
    /// RMSNorm weight before the mixer.
    pub mixer_norm: Vec<f32>,
    /// Token mixing.
    pub mixer: Mixer,
    /// RMSNorm weight before the FFN.
    pub ffn_norm: Vec<f32>,
    /// The SwiGLU FFN.
    pub ffn: Ffn,
}

/// How a layer mixes tokens.
pub(crate) enum Mixer {
    /// Causal attention over the KV cache.
    Attention(Attention),
    /// Gated DeltaNet over the recurrent state.
    DeltaNet(DeltaNet),
}

impl Layer {
    /// Bytes of weights the layer streams per token.
    pub fn bytes(&self) -> usize {
        let mixer = match &self.mixer {
            Mixer::Attention(a) => a.bytes(),
            Mixer::DeltaNet(g) => g.bytes(),
        };
        mixer + self.ffn.bytes()
    }
}

/// `out_i = m_i x` for matrices reading the same activation `x` (`n x k`): each distinct
/// transform of `x` ([`InputKind`]) is computed once and its quantized form is shared by every
/// ternary matrix reading it, all of which run as one step of the matmul driver; the same
/// for its per-vector int8 form and the BitNet matrices reading it.
pub(crate) fn project(
    ctx: &Ctx,
    mm: &mut MatmulScratch,
    x: &[f32],
    k: usize,
    jobs: &mut [(&Projection, &mut [f32])],
    phase: Phase,
) -> Result<()> {
    let MatmulScratch { xt, act, int8 } = mm;
    let kind_of = |m: &Projection| m.input_kind(ctx.round_bf16);
    // A layer passes at most four matrices: scanning the earlier ones finds each kind's first.
    for i in 0..jobs.len() {
        let kind = kind_of(jobs[i].0);
        if jobs[..i].iter().any(|(m, _)| kind_of(m) == kind) {
            continue;
        }
        let input = transform(ctx, kind, x, k, xt);
        let reads =
            |m: &Projection, want: fn(&Matrix) -> bool| kind_of(m) == kind && want(&m.matrix);
        let quantize = jobs[i..].iter().any(|(m, _)| reads(m, Matrix::is_ternary));
        let acts = Activations::prepare(ctx.exec, act, input, k, quantize)?;
        if let Some(batch) = acts.quantized() {
            let product = |&m: &_| {
                let t = Projection::ternary_for(m, kind, ctx.round_bf16);
                t.map(|t| T2pProduct::new(t, batch)).transpose()
            };
            let bytes = step_bytes(ctx, &jobs[i..], |m| {
                Projection::ternary_for(m, kind, ctx.round_bf16).map(|t| t.size_bytes())
            });
            run_step(ctx.exec, &mut jobs[i..], product, phase, bytes)?;
        }
        if jobs[i..].iter().any(|(m, _)| reads(m, is_int8)) {
            {
                let _t = ctx.exec.profile.time(Phase::Quantize);
                int8.quantize(&ctx.exec.pool, input, k, acts.n())?;
            }
            let (batch, scales) = (int8.batch(), int8.scales());
            let product = |&m: &_| {
                let t = Projection::int8_for(m, kind, ctx.round_bf16);
                t.map(|t| T2pProduct::unit_scales(t.t2p(), batch))
                    .transpose()
            };
            let bytes = step_bytes(ctx, &jobs[i..], |m| {
                m.int8_for(kind, ctx.round_bf16).map(|m| m.size_bytes())
            });
            run_step(ctx.exec, &mut jobs[i..], product, phase, bytes)?;
            for (m, out) in jobs[i..].iter_mut() {
                if let Some(m) = m.int8_for(kind, ctx.round_bf16) {
                    m.apply_scales(scales, out);
                }
            }
        }
        for (m, out) in jobs[i..].iter_mut() {
            if reads(m, |m| !m.is_ternary() && !is_int8(m) && !is_dense(m)) {
                m.matrix.forward(ctx.exec, &acts, out, phase)?;
            }
        }
        // The f32 matrices of this input (the DeltaNet's alpha and beta) in one pool call.
        dense_step(ctx.exec, &acts, &mut jobs[i..], |m| {
            reads(m, is_dense).then_some(&m.matrix)
        })?;
    }
    Ok(())
}

fn is_int8(m: &Matrix) -> bool {
    matches!(m, Matrix::Int8(_))
}

fn is_dense(m: &Matrix) -> bool {
    matches!(m, Matrix::Dense { .. })
}

/// The weights a step over `jobs` streams (the matrices `size` names), for the profile's
/// bandwidth per phase; 0 when the profile is off.
fn step_bytes(
    ctx: &Ctx,
    jobs: &[(&Projection, &mut [f32])],
    size: impl Fn(&Projection) -> Option<usize>,
) -> u64 {
    match ctx.exec.profile.is_on() {
        true => jobs
            .iter()
            .filter_map(|&(m, _)| size(m))
            .map(|b| b as u64)
            .sum(),
        false => 0,
    }
}

/// `x` as a matmul of input kind `kind` reads it: itself, or rotated and/or rounded to bf16
/// in `xt`.
fn transform<'a>(
    ctx: &Ctx,
    kind: InputKind,
    x: &'a [f32],
    k: usize,
    xt: &'a mut Vec<f32>,
) -> &'a [f32] {
    if kind == InputKind::PLAIN {
        return x;
    }
    let _t = ctx.exec.profile.time(Phase::Elementwise);
    match ctx.fold {
        Some(f) => f.apply_into(ctx.exec, kind.rotation, x, k, xt),
        None => {
            xt.clear();
            xt.extend_from_slice(x);
        }
    }
    if kind.bf16 {
        xt.iter_mut()
            .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
    }
    xt
}

/// Values an element-wise step hands to one pool job: below this a step runs on the calling
/// thread (waking a worker costs about as much as 4096 `expf`).
const PAR_MIN_VALUES: usize = 4096;

/// Values of one pool job of an element-wise step over rows of `row` values: at least
/// [`PAR_MIN_VALUES`], in whole rows.
fn par_piece(row: usize) -> usize {
    PAR_MIN_VALUES.div_ceil(row.max(1)) * row.max(1)
}

/// `f(dst_piece, src_piece)` over matching pieces of `dst` and `src` of `piece` values each
/// (the last may be shorter; `piece` is rounded up to a multiple of `row`, so rows stay whole),
/// spread over the pool when there are several.
pub(crate) fn par_zip(
    ctx: &Ctx,
    dst: &mut [f32],
    src: &[f32],
    row: usize,
    f: impl Fn(&mut [f32], &[f32]) + Sync,
) {
    let piece = par_piece(row);
    let n = dst.len().div_ceil(piece);
    if n <= 1 {
        f(dst, src);
    } else {
        let pieces = dst.chunks_mut(piece).zip(src.chunks(piece));
        ctx.exec.pool.for_each_item(n, pieces, |(d, s)| f(d, s));
    }
}

/// `dst[t] = rms_norm(src[t]) * w` for every token.
pub(crate) fn norm_rows(ctx: &Ctx, dst: &mut [f32], src: &[f32], w: &[f32]) {
    let _t = ctx.exec.profile.time(Phase::Elementwise);
    let d = w.len();
    par_zip(ctx, dst, src, d, |dst, src| {
        for (o, i) in dst.chunks_exact_mut(d).zip(src.chunks_exact(d)) {
            super::ops::rms_norm_into(o, i, w, ctx.hp.eps);
        }
    });
}

/// `x += y`, then `dst[t] = rms_norm(x[t]) * w` for every token: a residual add and the norm
/// that reads its sum in one pass, each row normed while it is still in cache (the same
/// operations in the same order as [`add`] then [`norm_rows`], so the same bits), over the
/// pool for a batch.
pub(crate) fn add_norm_rows(ctx: &Ctx, x: &mut [f32], y: &[f32], dst: &mut [f32], w: &[f32]) {
    let _t = ctx.exec.profile.time(Phase::Elementwise);
    let d = w.len().max(1);
    let piece = par_piece(d);
    let n = x.len().div_ceil(piece);
    let job = |(x, (y, dst)): (&mut [f32], (&[f32], &mut [f32]))| {
        let rows = x.chunks_exact_mut(d).zip(y.chunks_exact(d));
        for ((x, y), o) in rows.zip(dst.chunks_exact_mut(d)) {
            x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
            super::ops::rms_norm_into(o, x, w, ctx.hp.eps);
        }
    };
    let pieces = x
        .chunks_mut(piece)
        .zip(y.chunks(piece).zip(dst.chunks_mut(piece)));
    // A single piece runs on the calling thread.
    ctx.exec.pool.for_each_item(n, pieces, job);
}

/// `x += y`, over the pool for a batch.
pub(crate) fn add(ctx: &Ctx, x: &mut [f32], y: &[f32]) {
    let _t = ctx.exec.profile.time(Phase::Elementwise);
    par_zip(ctx, x, y, 1, |x, y| {
        x.iter_mut().zip(y).for_each(|(a, b)| *a += b)
    });
}
