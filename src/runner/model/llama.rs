//! The dense transformers: `llama` (stories260K, Llama-style models) and `qwen3` (Ternary
//! Bonsai 1.7B/4B/8B: per-head q/k RMSNorm, NeoX RoPE). They differ only in those two points.

use super::hparams::ArchDefaults;
use super::ops::RopeStyle;
use super::transformer::Arch;

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
