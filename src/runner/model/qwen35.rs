//! `qwen35`: the Qwen3.5 hybrid (Ternary Bonsai 2 27B). Every `full_attention_interval`-th
//! layer is gated full attention (the q projection also carries a per-head output gate;
//! per-head q/k RMSNorm; NeoX RoPE on the first `rope.dimension_count` dims, which is what
//! the file's IMROPE `rope.dimension_sections` amount to for text, where every section sees the
//! token position; query head `h` reads KV head `h / (n_head / n_head_kv)`); the others are
//! Gated DeltaNet layers (see [`super::blocks`] and [`super::deltanet`]). Both are followed by a
//! SwiGLU FFN after `post_attention_norm`. Checkpoints with a `prism.hadamard.*` fold are
//! honoured (see [`super::hadamard`]).
//!
//! Numerics follow llama.cpp's CPU semantics where they matter for agreement: ternary matmuls
//! quantize their activations, BF16 weights (`ssm_alpha`/`ssm_beta`) see their activations
//! rounded to bf16, K/V are stored as f16, norms sum in f64.

use super::hparams::ArchDefaults;
use super::ops::RopeStyle;
use super::transformer::Arch;

/// `qwen35`.
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
};
