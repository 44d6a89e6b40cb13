//! The gated feed-forward block: `down(act(gate(x)) * up(x))` (SwiGLU; BitNet: squared ReLU
//! and an RMSNorm of the hidden vector before `down`).

use super::{Ctx, par_zip, project};
use crate::runner::model::batch::Batch;
use crate::runner::model::error::Result;
use crate::runner::model::hparams::HParams;
use crate::runner::model::ops::{FfnAct, rms_norm};
use crate::runner::model::profile::Phase;
use crate::runner::model::weights::{Projection, WeightLoader};

/// One FFN's weights.
pub(crate) struct Ffn {
    gate: Projection,
    up: Projection,
    down: Projection,
    act: FfnAct,
    /// `ffn_sub_norm` (BitNet), applied to the hidden vector before `down`.
    sub_norm: Option<Vec<f32>>,
}

impl Ffn {
    /// Loads `blk.{i}.ffn_{gate,up,down}` (and `ffn_sub_norm` when `sub_norm`).
    pub fn load(
        weights: &mut WeightLoader,
        i: usize,
        hp: &HParams,
        act: FfnAct,
        sub_norm: bool,
    ) -> Result<Ffn> {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        let (d, ff) = (hp.dims.n_embd, hp.dims.n_ff);
        Ok(Ffn {
            gate: weights.mat(&p("ffn_gate"), ff, d, None)?,
            up: weights.mat(&p("ffn_up"), ff, d, None)?,
            down: weights.mat(&p("ffn_down"), d, ff, None)?,
            act,
            sub_norm: sub_norm
                .then(|| weights.vector(&p("ffn_sub_norm"), ff))
                .transpose()?,
        })
    }

    /// Bytes of weights per token.
    pub fn bytes(&self) -> usize {
        [&self.gate, &self.up, &self.down]
            .iter()
            .map(|m| m.matrix.size_bytes())
            .sum()
    }

    /// `st.out = ffn(st.xn)`.
    pub fn forward(&self, ctx: &Ctx, st: &mut Batch) -> Result<()> {
        let jobs = &mut [
            (&self.gate, &mut st.ff_gate[..]),
            (&self.up, &mut st.ff_up[..]),
        ];
        project(
            ctx,
            &mut st.mm,
            &st.xn,
            ctx.hp.dims.n_embd,
            jobs,
            Phase::Matmul,
        )?;
        let t = ctx.exec.profile.time(Phase::Elementwise);
        let (act, kern) = (self.act, ctx.exec.kern);
        par_zip(ctx, &mut st.ff_gate, &st.ff_up, 1, |gate, up| match act {
            FfnAct::Silu => kern.silu_mul(gate, up),
            _ => gate
                .iter_mut()
                .zip(up)
                .for_each(|(g, u)| *g = act.apply(*g) * u),
        });
        if let Some(w) = &self.sub_norm {
            let ff = ctx.hp.dims.n_ff;
            st.ff_gate
                .chunks_exact_mut(ff)
                .for_each(|h| rms_norm(h, w, ctx.hp.eps));
        }
        drop(t);
        let jobs = &mut [(&self.down, &mut st.out[..])];
        project(
            ctx,
            &mut st.mm,
            &st.ff_gate,
            ctx.hp.dims.n_ff,
            jobs,
            Phase::Matmul,
        )
    }
}
