//! The attention block: q/k/v projections, optional per-head q/k RMSNorm, RoPE, the KV cache,
//! causal attention, an optional per-head output gate (`qwen35`: the q projection carries it,
//! per head `head_dim` query rows then `head_dim` gate rows) and the output projection.

use super::{Ctx, Seqs, project};
use crate::runner::model::attend::{AttnShape, attend};
use crate::runner::model::batch::Batch;
use crate::runner::model::error::Result;
use crate::runner::model::hparams::HParams;
use crate::runner::model::ops::{rms_norm, rope, sigmoid};
use crate::runner::model::profile::Phase;
use crate::runner::model::weights::{Projection, WeightLoader};

/// A job of [`Attention::norm_and_rope`]: the q and k values of a few batch columns and their
/// RoPE cosines and sines.
type Columns<'a> = (&'a mut [f32], &'a mut [f32], &'a [f32], &'a [f32]);

/// One attention layer's weights.
pub(crate) struct Attention {
    wq: Projection,
    wk: Projection,
    wv: Projection,
    wo: Projection,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    /// `wq` also yields a per-head output gate.
    gated: bool,
    /// `attn_sub_norm` (BitNet): an RMSNorm of the attention output before `wo`.
    sub_norm: Option<Vec<f32>>,
    /// Layer index in the KV cache.
    slot: usize,
}

impl Attention {
    /// Loads `blk.{i}.attn_*` (with `attn_q_norm`/`attn_k_norm` when `qk_norm`).
    pub fn load(
        weights: &mut WeightLoader,
        i: usize,
        hp: &HParams,
        qk_norm: bool,
        gated: bool,
        sub_norm: bool,
        slot: usize,
    ) -> Result<Attention> {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        let (d, hd) = (hp.dims.n_embd, hp.dims.head_dim);
        let q_rows = if gated { 2 } else { 1 } * hp.q_dim();
        let mut norm = |s: &str| -> Result<Option<Vec<f32>>> {
            qk_norm.then(|| weights.vector(&p(s), hd)).transpose()
        };
        let (q_norm, k_norm) = (norm("attn_q_norm")?, norm("attn_k_norm")?);
        let sub_norm = sub_norm
            .then(|| weights.vector(&p("attn_sub_norm"), hp.q_dim()))
            .transpose()?;
        Ok(Attention {
            wq: weights.mat(&p("attn_q"), q_rows, d, None)?,
            wk: weights.mat(&p("attn_k"), hp.kv_dim(), d, None)?,
            wv: weights.mat(&p("attn_v"), hp.kv_dim(), d, None)?,
            wo: weights.mat(&p("attn_output"), d, hp.q_dim(), None)?,
            q_norm,
            k_norm,
            gated,
            sub_norm,
            slot,
        })
    }

    /// Bytes of weights per token.
    pub fn bytes(&self) -> usize {
        [&self.wq, &self.wk, &self.wv, &self.wo]
            .iter()
            .map(|m| m.matrix.size_bytes())
            .sum()
    }

    /// `st.out = attention(st.xn)` for every sequence, appending K/V to each cache.
    pub fn forward(&self, ctx: &Ctx, st: &mut Batch, seqs: &mut Seqs) -> Result<()> {
        let hp = ctx.hp;
        let (hd, q_dim, kv_dim) = (hp.dims.head_dim, hp.q_dim(), hp.kv_dim());
        let prof = &ctx.exec.profile;
        self.project_qkv(ctx, st)?;
        let shape = AttnShape {
            n_head: hp.dims.n_head,
            n_head_kv: hp.dims.n_head_kv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        self.norm_and_rope(ctx, st);
        // Timed up to the end of `attend` only: the gate, the sub-norm and `wo` book their
        // own phases.
        let t = prof.time(Phase::Attention);
        for (seq, span) in seqs.iter_mut().zip(&st.spans) {
            for c in span.cols.clone() {
                let pos = span.pos0 + c - span.cols.start;
                seq.session.cache.store(
                    self.slot,
                    pos,
                    &st.k[c * kv_dim..(c + 1) * kv_dim],
                    &st.v[c * kv_dim..(c + 1) * kv_dim],
                );
            }
        }
        // Every sequence's heads in one pool call: column `c` reads its own sequence's cache.
        let (spans, seqs) = (&st.spans, &*seqs);
        let n = spans.last().map_or(0, |s| s.cols.end);
        let at = |c: usize| {
            let i = spans
                .iter()
                .position(|s| s.cols.contains(&c))
                .expect("every column is in a span");
            let span = &spans[i];
            (&seqs[i].session.cache, span.pos0 + c - span.cols.start)
        };
        attend(
            ctx.exec,
            shape,
            &st.q[..n * q_dim],
            self.slot,
            at,
            &mut st.att[..n * q_dim],
        );
        drop(t);
        if self.gated {
            let _t = prof.time(Phase::Elementwise);
            st.att
                .iter_mut()
                .zip(&st.gate)
                .for_each(|(a, g)| *a *= sigmoid(*g));
        }
        if let Some(w) = &self.sub_norm {
            let _t = prof.time(Phase::Elementwise);
            st.att[..n * q_dim]
                .chunks_exact_mut(q_dim)
                .for_each(|a| rms_norm(a, w, hp.eps));
        }
        let jobs = &mut [(&self.wo, &mut st.out[..])];
        project(ctx, &mut st.mm, &st.att, q_dim, jobs, Phase::Matmul)
    }

    /// `st.q`, `st.k`, `st.v` (and `st.gate`) of every token from `st.xn`.
    fn project_qkv(&self, ctx: &Ctx, st: &mut Batch) -> Result<()> {
        let (d, hd) = (ctx.hp.dims.n_embd, ctx.hp.dims.head_dim);
        if !self.gated {
            let jobs = &mut [
                (&self.wq, &mut st.q[..]),
                (&self.wk, &mut st.k[..]),
                (&self.wv, &mut st.v[..]),
            ];
            return project(ctx, &mut st.mm, &st.xn, d, jobs, Phase::Matmul);
        }
        let jobs = &mut [
            (&self.wq, &mut st.qg[..]),
            (&self.wk, &mut st.k[..]),
            (&self.wv, &mut st.v[..]),
        ];
        project(ctx, &mut st.mm, &st.xn, d, jobs, Phase::Matmul)?;
        let _t = ctx.exec.profile.time(Phase::Elementwise);
        // Per head `hd` query values then `hd` gate values.
        let q_heads = st.q.chunks_exact_mut(hd);
        let g_heads = st.gate.chunks_exact_mut(hd);
        for ((q, g), pair) in q_heads.zip(g_heads).zip(st.qg.chunks_exact(2 * hd)) {
            q.copy_from_slice(&pair[..hd]);
            g.copy_from_slice(&pair[hd..]);
        }
        Ok(())
    }

    /// The q/k norms and RoPE of every batch column, at the position its tables were made for:
    /// a job is a few columns, over the pool when there are several.
    fn norm_and_rope(&self, ctx: &Ctx, st: &mut Batch) {
        let _t = ctx.exec.profile.time(Phase::Elementwise);
        let hp = ctx.hp;
        let (hd, q_dim, kv_dim, half) =
            (hp.dims.head_dim, hp.q_dim(), hp.kv_dim(), hp.rope_dims / 2);
        let n = st.spans.last().map_or(0, |s| s.cols.end);
        let one_column = |q: &mut [f32], k: &mut [f32], cos: &[f32], sin: &[f32]| {
            let q = q.chunks_exact_mut(hd).map(|h| (h, &self.q_norm));
            for (head, norm) in q.chain(k.chunks_exact_mut(hd).map(|h| (h, &self.k_norm))) {
                if let Some(w) = norm {
                    rms_norm(head, w, hp.eps);
                }
                rope(head, hp.rope_dims, hp.rope_style, cos, sin);
            }
        };
        // About 4096 values a job, as `par_zip` hands out.
        let cols = (4096 / (q_dim + kv_dim)).max(1);
        let jobs = n.div_ceil(cols);
        let pieces = (st.q[..n * q_dim].chunks_mut(cols * q_dim))
            .zip(st.k[..n * kv_dim].chunks_mut(cols * kv_dim))
            .zip(st.cos[..n * half].chunks(cols * half))
            .zip(st.sin[..n * half].chunks(cols * half))
            .map(|(((q, k), cos), sin)| (q, k, cos, sin));
        let job = |(q, k, cos, sin): Columns| {
            let columns = q.chunks_exact_mut(q_dim).zip(k.chunks_exact_mut(kv_dim));
            for (c, (q, k)) in columns.enumerate() {
                let t = c * half..(c + 1) * half;
                one_column(q, k, &cos[t.clone()], &sin[t]);
            }
        };
        match jobs {
            0 | 1 => pieces.for_each(job),
            _ => ctx.exec.pool.for_each_item(jobs, pieces, job),
        }
    }
}
