//! What distinguishes the architectures: each is an [`Arch`], a table of its tensor names and
//! options that the one [`Model`](super::Model) builder and forward pass read. `llama`
//! (stories260K, Llama-style models) and `qwen3` (Ternary Bonsai 1.7B/4B/8B: per-head q/k
//! RMSNorm, NeoX RoPE) differ only in those two points; `qwen35` is the hybrid; `bitnet-b1.58`
//! (BitNet b1.58 2B-4T) adds sub-norms and a squared-ReLU FFN.

use super::hparams::ArchDefaults;
use super::ops::{FfnAct, RopeStyle};

/// What distinguishes an architecture from the others.
pub(crate) struct Arch {
    /// `general.architecture` values it reads.
    pub names: &'static [&'static str],
    /// RoPE pairing, default epsilon and context, hybrid or not.
    pub defaults: ArchDefaults,
    /// Attention has per-head q/k RMSNorm (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// The q projection also yields a per-head output gate.
    pub gated_attention: bool,
    /// Name of the RMSNorm before the FFN (`blk.N.<name>.weight`).
    pub ffn_norm: &'static str,
    /// Honour a `prism.hadamard.*` fold.
    pub hadamard: bool,
    /// Round activations to bf16 before BF16 weights (llama.cpp's CPU matmul does).
    pub round_bf16: bool,
    /// RMSNorms inside the blocks: `attn_sub_norm` on the attention output before
    /// `attn_output`, `ffn_sub_norm` on the FFN's hidden vector before `ffn_down`.
    pub sub_norms: bool,
    /// The FFN's gate activation.
    pub ffn_act: FfnAct,
}

/// The architectures this runner implements.
pub(crate) const ARCHS: [&Arch; 4] = [&LLAMA, &QWEN3, &QWEN35, &BITNET];

/// `llama`: adjacent-pair RoPE, no q/k norm.
pub(crate) const LLAMA: Arch = Arch {
    names: &["llama"],
    defaults: ArchDefaults {
        rope_style: RopeStyle::Normal,
        eps: 1e-5,
        n_ctx_train: 2048,
        hybrid: false,
    },
    qk_norm: false,
    gated_attention: false,
    ffn_norm: "ffn_norm",
    hadamard: false,
    round_bf16: false,
    sub_norms: false,
    ffn_act: FfnAct::Silu,
};

/// `qwen3`: `llama` with NeoX RoPE and per-head q/k RMSNorm.
pub(crate) const QWEN3: Arch = Arch {
    names: &["qwen3"],
    defaults: ArchDefaults {
        rope_style: RopeStyle::Neox,
        ..LLAMA.defaults
    },
    qk_norm: true,
    ..LLAMA
};

/// `qwen35`: the Qwen3.5 hybrid (Ternary Bonsai 2 27B). Every `full_attention_interval`-th
/// layer is gated full attention (the q projection also carries a per-head output gate;
/// per-head q/k RMSNorm; NeoX RoPE on the first `rope.dimension_count` dims, which is what the
/// file's IMROPE `rope.dimension_sections` amount to for text, where every section sees the
/// token position; query head `h` reads KV head `h / (n_head / n_head_kv)`); the others are
/// Gated DeltaNet layers (see [`super::blocks`] and [`super::recurrent`]). Both are followed by
/// a SwiGLU FFN after `post_attention_norm`. Checkpoints with a `prism.hadamard.*` fold are
/// honoured (see [`super::hadamard`]).
///
/// Numerics follow llama.cpp's CPU semantics where they matter for agreement: ternary matmuls
/// quantize their activations, BF16 weights (`ssm_alpha`/`ssm_beta`) see their activations
/// rounded to bf16, K/V are stored as f16, norms sum in f64.
pub(crate) const QWEN35: Arch = Arch {
    names: &["qwen35"],
    defaults: ArchDefaults {
        rope_style: RopeStyle::Neox,
        eps: 1e-6,
        n_ctx_train: 4096,
        hybrid: true,
    },
    qk_norm: true,
    gated_attention: true,
    ffn_norm: "post_attention_norm",
    hadamard: true,
    round_bf16: true,
    sub_norms: false,
    ffn_act: FfnAct::Silu,
};

/// `bitnet-b1.58` (older uploads: `bitnet-25`): BitNet b1.58 2B-4T, after ik_llama.cpp's
/// `build_bitnet_158` and the transformers `bitnet` model. `llama` with NeoX RoPE, an RMSNorm
/// of the attention output before `attn_output` (`attn_sub_norm`), and the FFN
/// `down(ffn_sub_norm(relu(gate(x))^2 * up(x)))`; the head is tied to the F16 table when the
/// file has no `output.weight`. Its I2_S matrices run with per-token int8 activations
/// ([`crate::format::i2s`]).
pub(crate) const BITNET: Arch = Arch {
    names: &["bitnet-b1.58", "bitnet-25"],
    defaults: ArchDefaults {
        rope_style: RopeStyle::Neox,
        eps: 1e-5,
        n_ctx_train: 4096,
        hybrid: false,
    },
    sub_norms: true,
    ffn_act: FfnAct::ReluSquared,
    ..LLAMA
};
