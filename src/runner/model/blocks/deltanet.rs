//! The Gated DeltaNet block (`qwen35`'s linear-attention layers): projections to q | k | v, the
//! output gate `z` and the per-head gates alpha/beta; conv1d -> SiLU -> L2-normed q/k; the
//! delta-rule recurrence (see [`crate::runner::model::deltanet`]); gated per-head RMSNorm;
//! `ssm_out`.

use super::{Ctx, Seqs, par_zip, project};
use crate::runner::model::batch::Batch;
use crate::runner::model::error::{ModelError, Result};
use crate::runner::model::hadamard::GdnGeometry;
use crate::runner::model::hparams::HParams;
use crate::runner::model::ops::{rms_norm, sigmoid, silu};
use crate::runner::model::profile::Phase;
use crate::runner::model::recurrent::{DeltaInput, l2_norm_heads};
use crate::runner::model::weights::{Projection, WeightLoader};

/// One DeltaNet layer's weights.
pub(crate) struct DeltaNet {
    qkv: Projection,
    gate: Projection,
    alpha: Projection,
    beta: Projection,
    /// `conv_channels x conv_kernel`.
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    /// `-exp(A_log)` per value head.
    a: Vec<f32>,
    norm: Vec<f32>,
    out: Projection,
    /// Layer index in the recurrent state.
    slot: usize,
}

impl DeltaNet {
    /// Loads `blk.{i}.attn_qkv`, `attn_gate`, `ssm_*`.
    pub fn load(
        weights: &mut WeightLoader,
        i: usize,
        hp: &HParams,
        slot: usize,
    ) -> Result<DeltaNet> {
        let s = hp
            .ssm
            .ok_or_else(|| ModelError::BadShape("a DeltaNet layer without ssm.* keys".into()))?;
        let p = |n: &str| format!("blk.{i}.{n}.weight");
        let d = hp.dims.n_embd;
        let geo = GdnGeometry {
            head_dim: s.head_v_dim,
            n_k_heads: s.n_k_heads,
            n_v_heads: s.n_v_heads,
        };
        Ok(DeltaNet {
            qkv: weights.mat(&p("attn_qkv"), s.conv_channels(), d, None)?,
            gate: weights.mat(&p("attn_gate"), s.value_dim(), d, None)?,
            alpha: weights.mat(&p("ssm_alpha"), s.n_v_heads, d, None)?,
            beta: weights.mat(&p("ssm_beta"), s.n_v_heads, d, None)?,
            conv: weights.vector(&p("ssm_conv1d"), s.conv_channels() * s.conv_kernel)?,
            dt_bias: weights.vector(&format!("blk.{i}.ssm_dt.bias"), s.n_v_heads)?,
            a: weights.vector(&format!("blk.{i}.ssm_a"), s.n_v_heads)?,
            norm: weights.vector(&p("ssm_norm"), s.head_v_dim)?,
            out: weights.mat(&p("ssm_out"), d, s.value_dim(), Some(geo))?,
            slot,
        })
    }

    /// Bytes of weights per token (the conv weights too: they are read every token).
    pub fn bytes(&self) -> usize {
        [&self.qkv, &self.gate, &self.alpha, &self.beta, &self.out]
            .iter()
            .map(|m| m.matrix.size_bytes())
            .sum::<usize>()
            + 4 * self.conv.len()
    }

    /// `st.out = deltanet(st.xn)` for every sequence, advancing each recurrent state.
    pub fn forward(&self, ctx: &Ctx, st: &mut Batch, seqs: &mut Seqs) -> Result<()> {
        let (hp, prof) = (ctx.hp, &ctx.exec.profile);
        let s = hp.ssm.expect("loaded with a DeltaNet shape");
        let (nv, ch, kd, vd) = (s.n_v_heads, s.conv_channels(), s.key_dim(), s.value_dim());
        let jobs = &mut [
            (&self.qkv, &mut st.dn_qkv[..]),
            (&self.gate, &mut st.dn_z[..]),
            (&self.alpha, &mut st.dn_decay[..]),
            (&self.beta, &mut st.dn_beta[..]),
        ];
        project(ctx, &mut st.mm, &st.xn, hp.dims.n_embd, jobs, Phase::Matmul)?;
        let t = prof.time(Phase::Elementwise);
        for (i, v) in st.dn_decay.iter_mut().enumerate() {
            let z = *v + self.dt_bias[i % nv];
            let sp = if z > 20.0 { z } else { (1.0 + z.exp()).ln() };
            *v = (sp * self.a[i % nv]).exp();
        }
        st.dn_beta.iter_mut().for_each(|v| *v = sigmoid(*v));
        drop(t);
        let t = prof.time(Phase::Recurrence);
        for ((seq, span), upd) in seqs.iter_mut().zip(&st.spans).zip(&st.upds) {
            let (Some(upd), Some(rec)) = (*upd, seq.session.recurrent.as_mut()) else {
                continue;
            };
            let cols = span.cols.clone();
            let qkv = &mut st.dn_qkv[cols.start * ch..cols.end * ch];
            let norm_qk = |row: &mut [f32]| l2_norm_heads(&mut row[..2 * kd], s.head_k_dim, hp.eps);
            let (pool, conv) = (&ctx.exec.pool, &self.conv);
            rec.conv_silu(pool, (upd, self.slot), conv, qkv, &mut st.dn_hist, norm_qk);
            let input = DeltaInput {
                c: qkv,
                decay: &st.dn_decay[cols.start * nv..cols.end * nv],
                beta: &st.dn_beta[cols.start * nv..cols.end * nv],
            };
            let o = &mut st.dn_o[cols.start * vd..cols.end * vd];
            let exec = (&ctx.exec.pool, ctx.exec.kern);
            rec.recurrence(exec, (upd, self.slot), input, o, &mut st.dn_heads);
        }
        drop(t);
        let t = prof.time(Phase::Elementwise);
        // Gated per-head RMSNorm: rmsnorm(o_h) * ssm_norm * silu(z_h).
        par_zip(ctx, &mut st.dn_o, &st.dn_z, s.head_v_dim, |o, z| {
            let heads = o.chunks_exact_mut(s.head_v_dim);
            for (oh, zh) in heads.zip(z.chunks_exact(s.head_v_dim)) {
                rms_norm(oh, &self.norm, hp.eps);
                oh.iter_mut().zip(zh).for_each(|(v, z)| *v *= silu(*z));
            }
        });
        drop(t);
        let jobs = &mut [(&self.out, &mut st.out[..])];
        project(ctx, &mut st.mm, &st.dn_o, vd, jobs, Phase::Matmul)
    }
}
