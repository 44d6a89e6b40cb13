//! Hyper-parameters: one reader of the GGUF metadata for every architecture, with the few
//! defaults an architecture supplies.

use super::error::{ModelError, Result};
use super::ops::RopeStyle;
use super::recurrent::DeltaNetShape;
use crate::runner::{Array, GgufFile, Value};

/// What an architecture fixes that its metadata does not say.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ArchDefaults {
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// RMSNorm epsilon when the file has none.
    pub eps: f32,
    /// Training context when the file has none.
    pub n_ctx_train: usize,
    /// Whether some layers are Gated DeltaNet (`ssm.*` keys, `full_attention_interval`).
    pub hybrid: bool,
}

/// The transformer dimensions of a decoder: what a model's hyper-parameters and every
/// synthetic shape of the test kit have in common.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderDims {
    /// Residual width (`embedding_length`).
    pub n_embd: usize,
    /// Decoder layers run per token (`block_count` minus NextN/MTP blocks).
    pub n_layer: usize,
    /// FFN hidden width (`feed_forward_length`).
    pub n_ff: usize,
    /// Query heads of the attention layers (`attention.head_count`).
    pub n_head: usize,
    /// KV heads of the attention layers (`attention.head_count_kv`, default `n_head`).
    pub n_head_kv: usize,
    /// Values per attention head, keys and values alike (`attention.key_length`, default
    /// `n_embd / n_head`).
    pub head_dim: usize,
}

/// Hyper-parameters of a model, read from the GGUF metadata.
#[derive(Clone, Debug)]
pub struct HParams {
    /// `general.architecture`.
    pub arch: String,
    /// Widths, layers and heads.
    pub dims: DecoderDims,
    /// Dimensions rotated by RoPE from the start of each head (`rope.dimension_count`).
    pub rope_dims: usize,
    /// RoPE base frequency (`rope.freq_base`, default 10000).
    pub rope_base: f32,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// RMSNorm epsilon (also the L2-norm epsilon of the DeltaNet).
    pub eps: f32,
    /// Training context (`context_length`).
    pub n_ctx_train: usize,
    /// Vocabulary size (rows of the token table, filled in when it is loaded).
    pub n_vocab: usize,
    /// Per layer: Gated DeltaNet (`true`) or attention.
    pub recurrent: Vec<bool>,
    /// DeltaNet dimensions (hybrid architectures only).
    pub ssm: Option<DeltaNetShape>,
}

impl HParams {
    /// Query width of an attention layer (`n_head * head_dim`).
    pub fn q_dim(&self) -> usize {
        self.dims.n_head * self.dims.head_dim
    }

    /// K (and V) width of an attention layer (`n_head_kv * head_dim`).
    pub fn kv_dim(&self) -> usize {
        self.dims.n_head_kv * self.dims.head_dim
    }

    /// Attention layers.
    pub fn n_attn(&self) -> usize {
        self.recurrent.iter().filter(|&&r| !r).count()
    }

    /// DeltaNet layers.
    pub fn n_rec(&self) -> usize {
        self.dims.n_layer - self.n_attn()
    }

    /// Reads the hyper-parameters of `gguf` (`n_vocab` is left 0).
    pub(crate) fn from_gguf(gguf: &GgufFile, def: &ArchDefaults) -> Result<HParams> {
        let key = |k: &str| gguf.arch_key(k);
        let u = |k: &str| -> Result<usize> { Ok(gguf.get_u32(&key(k)?)? as usize) };
        let opt_u =
            |k: &str| -> Result<Option<usize>> { Ok(gguf.opt_u32(&key(k)?)?.map(|v| v as usize)) };
        let block_count = u("block_count")?;
        let nextn = opt_u("nextn_predict_layers")?.unwrap_or(0);
        if nextn >= block_count {
            return Err(ModelError::BadShape(format!(
                "{nextn} NextN layers of {block_count} blocks"
            )));
        }
        let n_layer = block_count - nextn;
        let n_embd = u("embedding_length")?;
        let n_head = u("attention.head_count")?;
        let n_head_kv = opt_u("attention.head_count_kv")?.unwrap_or(n_head);
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(ModelError::BadShape(format!(
                "{n_head} query heads cannot share {n_head_kv} KV heads"
            )));
        }
        let head_dim = opt_u("attention.key_length")?.unwrap_or(n_embd / n_head);
        let v_len = opt_u("attention.value_length")?.unwrap_or(head_dim);
        let rope_dims = opt_u("rope.dimension_count")?.unwrap_or(head_dim);
        if head_dim == 0 || v_len != head_dim || rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(ModelError::BadShape(format!(
                "head_dim {head_dim} (values {v_len}) with {rope_dims} rotated dimensions"
            )));
        }
        let (recurrent, ssm) = if def.hybrid {
            (
                recurrent_layers(gguf, n_layer)?,
                Some(deltanet_shape(gguf)?),
            )
        } else {
            (vec![false; n_layer], None)
        };
        Ok(HParams {
            arch: gguf.architecture()?.to_string(),
            dims: DecoderDims {
                n_embd,
                n_layer,
                n_ff: u("feed_forward_length")?,
                n_head,
                n_head_kv,
                head_dim,
            },
            rope_dims,
            rope_base: gguf.opt_f32(&key("rope.freq_base")?)?.unwrap_or(10000.0),
            rope_style: def.rope_style,
            eps: gguf
                .opt_f32(&key("attention.layer_norm_rms_epsilon")?)?
                .unwrap_or(def.eps),
            n_ctx_train: opt_u("context_length")?.unwrap_or(def.n_ctx_train),
            n_vocab: 0,
            recurrent,
            ssm,
        })
    }
}

/// Which layers are DeltaNet: `attention.recurrent_layers` when present (it overrides the
/// interval, as in llama.cpp), else all but every `full_attention_interval`-th.
fn recurrent_layers(gguf: &GgufFile, n_layer: usize) -> Result<Vec<bool>> {
    Ok(
        match gguf.get(&gguf.arch_key("attention.recurrent_layers")?) {
            Some(Value::Array(Array::Bool(v))) if v.len() >= n_layer => v[..n_layer].to_vec(),
            Some(v) => {
                return Err(ModelError::BadShape(format!(
                    "attention.recurrent_layers is {}, expected {n_layer} or more bools",
                    v.type_name()
                )));
            }
            None => {
                let every = gguf
                    .opt_u32(&gguf.arch_key("full_attention_interval")?)?
                    .unwrap_or(4) as usize;
                if every == 0 {
                    return Err(ModelError::BadShape("full_attention_interval 0".into()));
                }
                (0..n_layer).map(|i| (i + 1) % every != 0).collect()
            }
        },
    )
}

/// The DeltaNet dimensions from the `ssm.*` keys.
fn deltanet_shape(gguf: &GgufFile) -> Result<DeltaNetShape> {
    let u = |k: &str| -> Result<usize> { Ok(gguf.get_u32(&gguf.arch_key(k)?)? as usize) };
    let n_v_heads = u("ssm.time_step_rank")?;
    let n_k_heads = u("ssm.group_count")?;
    let head_k_dim = u("ssm.state_size")?;
    let inner = u("ssm.inner_size")?;
    let conv_kernel = u("ssm.conv_kernel")?;
    if n_k_heads == 0
        || n_v_heads == 0
        || n_v_heads % n_k_heads != 0
        || inner % n_v_heads != 0
        || inner / n_v_heads != head_k_dim
        || conv_kernel == 0
    {
        return Err(ModelError::BadShape(format!(
            "DeltaNet with {n_k_heads} key heads of {head_k_dim}, {n_v_heads} value heads, \
             inner size {inner}, conv kernel {conv_kernel} (value heads must be a multiple \
             of key heads, of the key head size)"
        )));
    }
    Ok(DeltaNetShape {
        n_k_heads,
        n_v_heads,
        head_k_dim,
        head_v_dim: inner / n_v_heads,
        conv_kernel,
    })
}
