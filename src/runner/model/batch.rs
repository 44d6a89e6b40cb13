//! The batch workspace: every buffer a forward pass works in besides what each session keeps
//! (its KV cache, recurrent state and logits). The [`Exec`](super::Exec) owns it, so one
//! allocation serves every session and every batch (like llama2.c's `RunState`); it is sized
//! by the first pass this large, and a later pass over as many tokens or fewer reuses it. Each
//! buffer keeps one meaning.
//!
//! Shapes below: `n` = tokens of the batch (all sequences), `r` = rows the LM head reads (the
//! last token of each sequence, or every token), `d` = `n_embd`.

use super::hparams::HParams;
use super::ops::rope_angles;
use super::recurrent::Update;
use crate::matmul::{Int8Acts, QuantizedBatch};

/// Where one sequence of a batched forward pass sits: its columns in the batch and the
/// position of its first token.
#[derive(Clone, Debug)]
pub(crate) struct Span {
    pub cols: std::ops::Range<usize>,
    pub pos0: usize,
}

/// Inputs of a group of matmuls: a transformed copy of the activations and their quantized form.
#[derive(Debug, Default)]
pub(crate) struct MatmulScratch {
    /// `[n][k]`: the activation after the fold's rotation and/or bf16 rounding.
    pub xt: Vec<f32>,
    /// The quantized activations every T2P matrix of the group reads.
    pub act: QuantizedBatch,
    /// The per-vector int8 activations every BitNet matrix of the group reads.
    pub int8: Int8Acts,
}

/// The buffers of a forward pass (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    /// Per sequence: its columns and first position.
    pub(crate) spans: Vec<Span>,
    /// Per sequence: which recurrent buffers this pass reads and writes (hybrid models).
    pub(crate) upds: Vec<Option<Update>>,
    /// Per sequence: rows it gets from the LM head.
    pub(crate) rows: Vec<usize>,
    /// `[n][d]`: the residual stream.
    pub(crate) x: Vec<f32>,
    /// `[n][d]`: the normed residual a block reads.
    pub(crate) xn: Vec<f32>,
    /// `[n][d]`: a block's output, added to `x`.
    pub(crate) out: Vec<f32>,
    /// `[n][n_head * head_dim]`: queries.
    pub(crate) q: Vec<f32>,
    /// `[n][2 * n_head * head_dim]`: the joint query | gate projection of gated attention.
    pub(crate) qg: Vec<f32>,
    /// `[n][n_head * head_dim]`: the output gate of gated attention.
    pub(crate) gate: Vec<f32>,
    /// `[n][n_head_kv * head_dim]`: keys.
    pub(crate) k: Vec<f32>,
    /// `[n][n_head_kv * head_dim]`: values.
    pub(crate) v: Vec<f32>,
    /// `[n][n_head * head_dim]`: attention output.
    pub(crate) att: Vec<f32>,
    /// `[n][rope_dims / 2]`: RoPE cosines of each token's position (made once per pass, read
    /// by every attention layer).
    pub(crate) cos: Vec<f32>,
    /// `[n][rope_dims / 2]`: RoPE sines, likewise.
    pub(crate) sin: Vec<f32>,
    /// `[n][n_ff]`: FFN gate, then `silu(gate) * up`.
    pub(crate) ff_gate: Vec<f32>,
    /// `[n][n_ff]`: FFN up.
    pub(crate) ff_up: Vec<f32>,
    /// `[n][conv_channels]`: DeltaNet q | k | v, before and after the conv.
    pub(crate) dn_qkv: Vec<f32>,
    /// `[n][value_dim]`: DeltaNet output gate `z`.
    pub(crate) dn_z: Vec<f32>,
    /// `[n][n_v_heads]`: DeltaNet alpha, then the decay `exp(softplus(alpha + dt) * a)`.
    pub(crate) dn_decay: Vec<f32>,
    /// `[n][n_v_heads]`: DeltaNet beta, then `sigmoid(beta)`.
    pub(crate) dn_beta: Vec<f32>,
    /// `[n][value_dim]`: DeltaNet output.
    pub(crate) dn_o: Vec<f32>,
    /// `[conv_kernel - 1 + n][conv_channels]`: conv history and batch of one sequence.
    pub(crate) dn_hist: Vec<f32>,
    /// `[n_v_heads][n][head_v_dim]`: recurrence output of one sequence, head-major.
    pub(crate) dn_heads: Vec<f32>,
    /// `[r][d]`: the rows the LM head reads.
    pub(crate) head_in: Vec<f32>,
    /// `[r][n_vocab]`: logits of every sequence's rows, before they go to the sessions (unused
    /// when one sequence runs alone: the LM head then writes into its session).
    pub(crate) logits: Vec<f32>,
    /// Inputs of matmul groups.
    pub(crate) mm: MatmulScratch,
}

impl Batch {
    /// Gives every buffer but `logits` its shape for `n` tokens and `r` head rows (allocating
    /// only when one grows past what an earlier pass needed); `gated`: the attention has an
    /// output gate.
    pub(crate) fn size(&mut self, hp: &HParams, gated: bool, n: usize, r: usize) {
        let d = hp.dims.n_embd;
        let (q, kv) = (hp.q_dim(), hp.kv_dim());
        let sized = |v: &mut Vec<f32>, len: usize| v.resize(len, 0.0);
        sized(&mut self.x, n * d);
        sized(&mut self.xn, n * d);
        sized(&mut self.out, n * d);
        if hp.n_attn() > 0 {
            sized(&mut self.q, n * q);
            if gated {
                sized(&mut self.qg, n * 2 * q);
                sized(&mut self.gate, n * q);
            }
            sized(&mut self.k, n * kv);
            sized(&mut self.v, n * kv);
            sized(&mut self.att, n * q);
        }
        if hp.n_attn() > 0 {
            sized(&mut self.cos, n * (hp.rope_dims / 2));
            sized(&mut self.sin, n * (hp.rope_dims / 2));
        }
        sized(&mut self.ff_gate, n * hp.dims.n_ff);
        sized(&mut self.ff_up, n * hp.dims.n_ff);
        if let Some(s) = hp.ssm {
            sized(&mut self.dn_qkv, n * s.conv_channels());
            sized(&mut self.dn_z, n * s.value_dim());
            sized(&mut self.dn_decay, n * s.n_v_heads);
            sized(&mut self.dn_beta, n * s.n_v_heads);
            sized(&mut self.dn_o, n * s.value_dim());
        }
        sized(&mut self.head_in, r * d);
    }

    /// The RoPE tables of every token of the batch (`spans` laid out by the pass), once per
    /// pass rather than once per attention layer.
    pub(crate) fn rope_tables(&mut self, hp: &HParams) {
        let half = hp.rope_dims / 2;
        if hp.n_attn() == 0 || half == 0 {
            return;
        }
        let tables = self
            .cos
            .chunks_exact_mut(half)
            .zip(self.sin.chunks_exact_mut(half));
        let positions = self
            .spans
            .iter()
            .flat_map(|s| s.pos0..s.pos0 + s.cols.len());
        for ((cos, sin), pos) in tables.zip(positions) {
            rope_angles(pos, hp.rope_dims, hp.rope_base, cos, sin);
        }
    }
}
