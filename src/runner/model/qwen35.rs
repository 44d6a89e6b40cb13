//! `qwen35`: the Qwen3.5 hybrid (Ternary Bonsai 2 27B). Every `full_attention_interval`-th
//! layer is gated full attention (the q projection also carries a per-head output gate;
//! per-head q/k RMSNorm; NeoX RoPE on the first `rope.dimension_count` dims, which is what
//! the file's IMROPE `rope.dimension_sections` amount to for text, where every section sees the
//! token position; query head `h` reads KV head `h / (n_head / n_head_kv)`); the others are Gated DeltaNet layers
//! (conv1d -> SiLU -> L2-normed q/k, delta-rule recurrence, gated per-head RMSNorm, `ssm_out`;
//! see [`super::deltanet`]). Both are followed by a SwiGLU FFN. Checkpoints with a
//! `prism.hadamard.*` fold are honoured (see [`super::hadamard`]).
//!
//! Numerics follow llama.cpp's CPU semantics where they matter for agreement: ternary matmuls
//! quantize their activations (T2P: q8_K), BF16 weights (`ssm_alpha`/`ssm_beta`) see their
//! activations rounded to bf16, K/V are stored as f16, norms sum in f64.

use std::collections::HashSet;

use super::attention::{AttnShape, attend};
use super::deltanet::{DeltaNetShape, RecurrentState, l2_norm_heads};
use super::error::{ModelError, Result};
use super::hadamard::{FoldKind, GdnGeometry, HadamardFold};
use super::kv_cache::KvCache;
use super::linear::{Exec, Input, Linear};
use super::llama::{batch_spans, output_rows, split_logits, take_linear, take_vector};
use super::ops::{RopeStyle, rms_norm, rms_norm_into, rope, rope_angles, sigmoid, silu};
use crate::runner::{Array, GgmlType, GgufFile, TensorStore, Value};

/// Hyper-parameters of a `qwen35` file.
#[derive(Clone, Debug)]
pub struct Qwen35Config {
    /// Residual width.
    pub n_embd: usize,
    /// Decoder layers run per token (`block_count` minus NextN/MTP blocks).
    pub n_layer: usize,
    /// FFN hidden width.
    pub n_ff: usize,
    /// Query heads of the attention layers.
    pub n_head: usize,
    /// KV heads of the attention layers.
    pub n_head_kv: usize,
    /// Values per attention head.
    pub head_dim: usize,
    /// Rotated dimensions at the start of each head.
    pub rope_dims: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RMSNorm epsilon (also the L2-norm epsilon of the DeltaNet).
    pub eps: f32,
    /// Training context.
    pub n_ctx_train: usize,
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Per layer: Gated DeltaNet (`true`) or full attention.
    pub recurrent: Vec<bool>,
    /// DeltaNet dimensions.
    pub ssm: DeltaNetShape,
}

impl Qwen35Config {
    /// Reads the hyper-parameters (`n_vocab` is filled in from the token table).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Qwen35Config> {
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
        // `attention.recurrent_layers`, when present, overrides the interval (llama.cpp).
        let recurrent: Vec<bool> = match gguf.get(&key("attention.recurrent_layers")?) {
            Some(Value::Array(Array::Bool(v))) if v.len() >= n_layer => v[..n_layer].to_vec(),
            Some(v) => {
                return Err(ModelError::BadShape(format!(
                    "attention.recurrent_layers is {}, expected {n_layer} or more bools",
                    v.type_name()
                )));
            }
            None => {
                let every = opt_u("full_attention_interval")?.unwrap_or(4);
                if every == 0 {
                    return Err(ModelError::BadShape("full_attention_interval 0".into()));
                }
                (0..n_layer).map(|i| (i + 1) % every != 0).collect()
            }
        };
        let n_v_heads = u("ssm.time_step_rank")?;
        let n_k_heads = u("ssm.group_count")?;
        let head_k_dim = u("ssm.state_size")?;
        let inner = u("ssm.inner_size")?;
        let conv_kernel = u("ssm.conv_kernel")?;
        if n_k_heads == 0
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
        Ok(Qwen35Config {
            n_embd,
            n_layer,
            n_ff: u("feed_forward_length")?,
            n_head,
            n_head_kv,
            head_dim,
            rope_dims,
            rope_base: gguf.opt_f32(&key("rope.freq_base")?)?.unwrap_or(10000.0),
            eps: gguf
                .opt_f32(&key("attention.layer_norm_rms_epsilon")?)?
                .unwrap_or(1e-6),
            n_ctx_train: opt_u("context_length")?.unwrap_or(4096),
            n_vocab: 0,
            recurrent,
            ssm: DeltaNetShape {
                n_k_heads,
                n_v_heads,
                head_k_dim,
                head_v_dim: inner / n_v_heads,
                conv_kernel,
            },
        })
    }
}

/// A matrix with what its activation needs first: the fold's rotation, bf16 rounding.
struct Mat {
    lin: Linear,
    fold: FoldKind,
    /// The file holds the weight in BF16: llama.cpp rounds the activation to bf16 too.
    bf16_input: bool,
}

enum Mixer {
    Attention {
        /// Per head `head_dim` query rows then `head_dim` gate rows.
        wq: Mat,
        wk: Mat,
        wv: Mat,
        wo: Mat,
        q_norm: Vec<f32>,
        k_norm: Vec<f32>,
        /// Layer index in the KV cache (attention layers only).
        slot: usize,
    },
    DeltaNet {
        qkv: Mat,
        gate: Mat,
        alpha: Mat,
        beta: Mat,
        /// `conv_channels x conv_kernel`.
        conv: Vec<f32>,
        dt_bias: Vec<f32>,
        /// `-exp(A_log)` per value head.
        a: Vec<f32>,
        norm: Vec<f32>,
        out: Mat,
        /// Layer index in the recurrent state (DeltaNet layers only).
        slot: usize,
    },
}

struct Layer {
    attn_norm: Vec<f32>,
    post_norm: Vec<f32>,
    mixer: Mixer,
    ffn_gate: Mat,
    ffn_up: Mat,
    ffn_down: Mat,
}

/// A loaded `qwen35` model.
pub struct Qwen35 {
    /// Hyper-parameters.
    pub cfg: Qwen35Config,
    /// Boxed: rarely present, and it keeps [`super::Model`]'s variants of similar size.
    fold: Option<Box<HadamardFold>>,
    tok_embd: Linear,
    /// The token table's rows are stored rotated: a looked-up row gets `R^T`.
    tok_rotated: bool,
    layers: Vec<Layer>,
    out_norm: Vec<f32>,
    /// The LM head (`None`: tied to the token table).
    output: Option<Mat>,
    /// Round activations to bf16 before BF16 weights (llama.cpp; off = exact-weights semantics).
    round_bf16: bool,
    n_attn: usize,
    n_rec: usize,
}

/// Loads matrices and records which listed names of the fold were honoured.
struct Loader<'a> {
    store: &'a mut TensorStore,
    fold: Option<&'a HadamardFold>,
    honoured: HashSet<String>,
}

impl Loader<'_> {
    fn mat(&mut self, name: &str, rows: usize, k: usize, geo: Option<GdnGeometry>) -> Result<Mat> {
        let bf16_input = self
            .store
            .get(name)
            .is_some_and(|t| t.ggml_type() == GgmlType::BF16);
        let lin = take_linear(self.store, name, rows, k)?;
        let fold = match self.fold {
            Some(f) if f.is_rotated(name) => {
                f.check_width(name, k)?;
                self.honoured.insert(name.to_string());
                match geo {
                    Some(g) if f.gdn_v_grouped() => FoldKind::PermuteRotate(g),
                    _ => FoldKind::Rotate,
                }
            }
            _ => FoldKind::None,
        };
        Ok(Mat {
            lin,
            fold,
            bf16_input,
        })
    }
}

/// `out_i = m_i x` for matrices reading the same activation `x` (`n x k`): each distinct
/// transform of `x` (rotation, bf16 rounding) is computed once and its q8_K form is shared by
/// every ternary matrix reading it.
fn matmuls(
    exec: &Exec,
    fold: Option<&HadamardFold>,
    round_bf16: bool,
    x: &[f32],
    k: usize,
    jobs: &mut [(&Mat, &mut Vec<f32>)],
) -> Result<()> {
    let n = x.len() / k;
    // (rotation, bf16 rounding) -> the transformed copy of `x`, if it differs from `x`.
    type Variant = (FoldKind, bool);
    let mut variants: Vec<(Variant, Option<Vec<f32>>)> = Vec::new();
    let key = |m: &Mat| (m.fold, m.bf16_input && round_bf16);
    for (m, _) in jobs.iter() {
        let key = key(m);
        if variants.iter().any(|(v, _)| *v == key) {
            continue;
        }
        let mut buf = fold.and_then(|f| f.apply(exec, m.fold, x, k));
        if key.1 {
            let b = buf.get_or_insert_with(|| x.to_vec());
            b.iter_mut()
                .for_each(|v| *v = half::bf16::from_f32(*v).to_f32());
        }
        variants.push((key, buf));
    }
    let inputs: Vec<(Variant, Input)> = variants
        .iter()
        .map(|(key, buf)| (*key, Input::new(buf.as_deref().unwrap_or(x), k)))
        .collect();
    for (m, out) in jobs.iter_mut() {
        out.resize(n * m.lin.rows(), 0.0);
        let key = key(m);
        let inp = &inputs.iter().find(|(v, _)| *v == key).expect("variant").1;
        m.lin.forward(exec, inp, out)?;
    }
    Ok(())
}

impl Qwen35 {
    /// Builds the model from the file's metadata and its loaded tensors.
    pub fn new(gguf: &GgufFile, mut store: TensorStore) -> Result<Qwen35> {
        let mut cfg = Qwen35Config::from_gguf(gguf)?;
        let fold = HadamardFold::from_gguf(gguf)?.map(Box::new);
        let (d, hd, s) = (cfg.n_embd, cfg.head_dim, cfg.ssm);
        let tok = store
            .get("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        cfg.n_vocab = tok.n_rows();
        let tok_embd = take_linear(&mut store, "token_embd.weight", cfg.n_vocab, d)?;
        let mut ld = Loader {
            store: &mut store,
            fold: fold.as_deref(),
            honoured: HashSet::new(),
        };
        let tok_rotated = fold
            .as_ref()
            .is_some_and(|f| f.is_rotated("token_embd.weight"));
        if tok_rotated {
            fold.as_ref()
                .map_or(Ok(()), |f| f.check_width("token_embd.weight", d))?;
            ld.honoured.insert("token_embd.weight".into());
        }
        let geo = GdnGeometry {
            head_dim: s.head_v_dim,
            n_k_heads: s.n_k_heads,
            n_v_heads: s.n_v_heads,
        };
        let (mut n_attn, mut n_rec) = (0, 0);
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            let mixer = if cfg.recurrent[i] {
                n_rec += 1;
                Mixer::DeltaNet {
                    qkv: ld.mat(&p("attn_qkv"), s.conv_channels(), d, None)?,
                    gate: ld.mat(&p("attn_gate"), s.value_dim(), d, None)?,
                    alpha: ld.mat(&p("ssm_alpha"), s.n_v_heads, d, None)?,
                    beta: ld.mat(&p("ssm_beta"), s.n_v_heads, d, None)?,
                    conv: take_vector(
                        ld.store,
                        &p("ssm_conv1d"),
                        s.conv_channels() * s.conv_kernel,
                    )?,
                    dt_bias: take_vector(ld.store, &format!("blk.{i}.ssm_dt.bias"), s.n_v_heads)?,
                    a: take_vector(ld.store, &format!("blk.{i}.ssm_a"), s.n_v_heads)?,
                    norm: take_vector(ld.store, &p("ssm_norm"), s.head_v_dim)?,
                    out: ld.mat(&p("ssm_out"), d, s.value_dim(), Some(geo))?,
                    slot: n_rec - 1,
                }
            } else {
                n_attn += 1;
                Mixer::Attention {
                    wq: ld.mat(&p("attn_q"), 2 * cfg.n_head * hd, d, None)?,
                    wk: ld.mat(&p("attn_k"), cfg.n_head_kv * hd, d, None)?,
                    wv: ld.mat(&p("attn_v"), cfg.n_head_kv * hd, d, None)?,
                    wo: ld.mat(&p("attn_output"), d, cfg.n_head * hd, None)?,
                    q_norm: take_vector(ld.store, &p("attn_q_norm"), hd)?,
                    k_norm: take_vector(ld.store, &p("attn_k_norm"), hd)?,
                    slot: n_attn - 1,
                }
            };
            layers.push(Layer {
                attn_norm: take_vector(ld.store, &p("attn_norm"), d)?,
                post_norm: take_vector(ld.store, &p("post_attention_norm"), d)?,
                mixer,
                ffn_gate: ld.mat(&p("ffn_gate"), cfg.n_ff, d, None)?,
                ffn_up: ld.mat(&p("ffn_up"), cfg.n_ff, d, None)?,
                ffn_down: ld.mat(&p("ffn_down"), d, cfg.n_ff, None)?,
            });
        }
        let out_norm = take_vector(ld.store, "output_norm.weight", d)?;
        let output = match ld.store.get("output.weight") {
            Some(_) => Some(ld.mat("output.weight", cfg.n_vocab, d, None)?),
            None => None, // tied: the token table is the LM head
        };
        if let Some(f) = &fold {
            let mut missing: Vec<&str> = f.names().filter(|n| !ld.honoured.contains(*n)).collect();
            if !missing.is_empty() {
                missing.sort_unstable();
                return Err(ModelError::BadShape(format!(
                    "prism.hadamard: {} listed weight(s) are not matrices this runner applies \
                     (e.g. {:?})",
                    missing.len(),
                    &missing[..missing.len().min(3)]
                )));
            }
        }
        Ok(Qwen35 {
            cfg,
            fold,
            tok_embd,
            tok_rotated,
            layers,
            out_norm,
            output,
            round_bf16: true,
            n_attn,
            n_rec,
        })
    }

    /// A KV cache for `n_ctx` positions (attention layers only).
    pub fn new_cache(&self, n_ctx: usize) -> KvCache {
        KvCache::new(self.n_attn, n_ctx, self.cfg.n_head_kv * self.cfg.head_dim)
    }

    /// A zero recurrent state (DeltaNet layers only).
    pub fn new_recurrent_state(&self) -> RecurrentState {
        RecurrentState::new(self.cfg.ssm, self.n_rec)
    }

    /// Whether activations are rounded to bf16 before a BF16 weight, as llama.cpp's CPU
    /// matmul does (the default). Off gives the exact-weights (f32) semantics the F32 twin of
    /// a file has, which the `f32` references of the test data use.
    pub fn set_round_bf16_activations(&mut self, on: bool) {
        self.round_bf16 = on;
    }

    /// The parsed Hadamard fold, if the file has one.
    pub fn hadamard(&self) -> Option<&HadamardFold> {
        self.fold.as_deref()
    }

    /// Bytes of weights streamed per decoded token.
    pub fn bytes_per_token(&self) -> usize {
        let mats = |l: &Layer| -> usize {
            let mixer: usize = match &l.mixer {
                Mixer::Attention { wq, wk, wv, wo, .. } => {
                    [wq, wk, wv, wo].iter().map(|m| m.lin.size_bytes()).sum()
                }
                Mixer::DeltaNet {
                    qkv,
                    gate,
                    alpha,
                    beta,
                    out,
                    conv,
                    ..
                } => {
                    [qkv, gate, alpha, beta, out]
                        .iter()
                        .map(|m| m.lin.size_bytes())
                        .sum::<usize>()
                        + 4 * conv.len()
                }
            };
            mixer
                + [&l.ffn_gate, &l.ffn_up, &l.ffn_down]
                    .iter()
                    .map(|m| m.lin.size_bytes())
                    .sum::<usize>()
        };
        self.layers.iter().map(mats).sum::<usize>()
            + self
                .output
                .as_ref()
                .map_or(self.tok_embd.size_bytes(), |m| m.lin.size_bytes())
    }

    /// Runs `tokens` at positions `cache.len()..`, advancing the KV cache and the recurrent
    /// state; returns the logits of every position (`all_logits`) or of the last one.
    pub fn forward(
        &self,
        exec: &Exec,
        cache: &mut KvCache,
        rec: &mut RecurrentState,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>> {
        let mut out = self.forward_batch(exec, &mut [(cache, rec, tokens)], all_logits)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// [`forward`](Self::forward) for several sequences at once, each `(cache, state, tokens)`
    /// at its own position: every matrix runs once over the columns of all sequences,
    /// attention and the DeltaNet conv/recurrence run per sequence on its own cache and
    /// state. Columns of a matmul (and their activation quantization) are independent, so each
    /// sequence gets exactly the logits it would get alone. Sequences without tokens get no
    /// logits. Nothing is written unless every sequence fits and its state is at its position.
    pub fn forward_batch(
        &self,
        exec: &Exec,
        seqs: &mut [(&mut KvCache, &mut RecurrentState, &[u32])],
        all_logits: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let c = &self.cfg;
        let (d, hd) = (c.n_embd, c.head_dim);
        for (cache, _, tokens) in seqs.iter() {
            let needed = cache.len() + tokens.len();
            if needed > cache.n_ctx() {
                return Err(ModelError::ContextOverflow {
                    needed,
                    n_ctx: cache.n_ctx(),
                });
            }
            if let Some(&id) = tokens.iter().find(|&&id| id as usize >= c.n_vocab) {
                return Err(ModelError::BadToken(id));
            }
        }
        let spans = batch_spans(seqs.iter().map(|(cache, _, t)| (cache.len(), t.len())));
        let n: usize = seqs.iter().map(|(_, _, t)| t.len()).sum();
        if n == 0 {
            return Ok(vec![Vec::new(); seqs.len()]);
        }
        // `begin` checks that each state is at its session's position and only allocates (the
        // second buffer of a checkpointed state), so a failure here leaves every state as it was.
        let mut upds = Vec::with_capacity(seqs.len());
        for ((_, rec, _), span) in seqs.iter_mut().zip(&spans) {
            upds.push(if span.cols.is_empty() {
                None
            } else {
                Some(rec.begin(span.pos0)?)
            });
        }
        let fold = self.fold.as_deref();
        let mut x = vec![0.0f32; n * d];
        for (t, &id) in seqs.iter().flat_map(|(_, _, t)| t.iter()).enumerate() {
            let row = &mut x[t * d..(t + 1) * d];
            self.tok_embd.dequantize_row(id as usize, row);
            if self.tok_rotated
                && let Some(f) = fold
            {
                f.unrotate(row);
            }
        }
        let mut h = vec![0.0f32; n * d];
        let (mut b1, mut b2, mut b3, mut b4) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut tmp = Vec::new();
        let (mut cos, mut sin) = (vec![0.0f32; c.rope_dims / 2], vec![0.0f32; c.rope_dims / 2]);
        for l in &self.layers {
            for t in 0..n {
                rms_norm_into(
                    &mut h[t * d..(t + 1) * d],
                    &x[t * d..(t + 1) * d],
                    &l.attn_norm,
                    c.eps,
                );
            }
            match &l.mixer {
                Mixer::Attention {
                    wq,
                    wk,
                    wv,
                    wo,
                    q_norm,
                    k_norm,
                    slot,
                } => {
                    matmuls(
                        exec,
                        fold,
                        self.round_bf16,
                        &h,
                        d,
                        &mut [(wq, &mut b1), (wk, &mut b2), (wv, &mut b3)],
                    )?;
                    let (q_dim, kv_dim) = (c.n_head * hd, c.n_head_kv * hd);
                    // Split the joint projection: per head `hd` query values then `hd` gate.
                    let mut q = vec![0.0f32; n * q_dim];
                    let mut gate = vec![0.0f32; n * q_dim];
                    for (t, qg) in b1.chunks_exact(2 * q_dim).enumerate() {
                        for (hh, pair) in qg.chunks_exact(2 * hd).enumerate() {
                            let at = t * q_dim + hh * hd;
                            q[at..at + hd].copy_from_slice(&pair[..hd]);
                            gate[at..at + hd].copy_from_slice(&pair[hd..]);
                        }
                    }
                    let shape = AttnShape {
                        n_head: c.n_head,
                        n_head_kv: c.n_head_kv,
                        head_dim: hd,
                        scale: 1.0 / (hd as f32).sqrt(),
                    };
                    let mut attn = vec![0.0f32; n * q_dim];
                    for ((cache, _, _), span) in seqs.iter_mut().zip(&spans) {
                        for t in span.cols.clone() {
                            let pos = span.pos0 + t - span.cols.start;
                            rope_angles(pos, c.rope_dims, c.rope_base, &mut cos, &mut sin);
                            for head in q[t * q_dim..(t + 1) * q_dim].chunks_exact_mut(hd) {
                                rms_norm(head, q_norm, c.eps);
                                rope(head, c.rope_dims, RopeStyle::Neox, &cos, &sin);
                            }
                            for head in b2[t * kv_dim..(t + 1) * kv_dim].chunks_exact_mut(hd) {
                                rms_norm(head, k_norm, c.eps);
                                rope(head, c.rope_dims, RopeStyle::Neox, &cos, &sin);
                            }
                            cache.store(
                                *slot,
                                pos,
                                &b2[t * kv_dim..(t + 1) * kv_dim],
                                &b3[t * kv_dim..(t + 1) * kv_dim],
                            );
                        }
                        let cols = span.cols.start * q_dim..span.cols.end * q_dim;
                        attend(
                            exec,
                            shape,
                            &q[cols.clone()],
                            cache,
                            *slot,
                            span.pos0,
                            &mut attn[cols],
                        );
                    }
                    attn.iter_mut()
                        .zip(&gate)
                        .for_each(|(a, g)| *a *= sigmoid(*g));
                    matmuls(
                        exec,
                        fold,
                        self.round_bf16,
                        &attn,
                        q_dim,
                        &mut [(wo, &mut tmp)],
                    )?;
                }
                Mixer::DeltaNet {
                    qkv,
                    gate,
                    alpha,
                    beta,
                    conv,
                    dt_bias,
                    a,
                    norm,
                    out,
                    slot,
                } => {
                    let s = c.ssm;
                    let nv = s.n_v_heads;
                    matmuls(
                        exec,
                        fold,
                        self.round_bf16,
                        &h,
                        d,
                        &mut [
                            (qkv, &mut b1),
                            (gate, &mut b2),
                            (alpha, &mut b3),
                            (beta, &mut b4),
                        ],
                    )?;
                    // b3: alpha -> decay exp(softplus(alpha + dt_bias) * a); b4: beta.
                    for (i, v) in b3.iter_mut().enumerate() {
                        let z = *v + dt_bias[i % nv];
                        let sp = if z > 20.0 { z } else { (1.0 + z.exp()).ln() };
                        *v = (sp * a[i % nv]).exp();
                    }
                    b4.iter_mut().for_each(|v| *v = sigmoid(*v));
                    let (ch, kd) = (s.conv_channels(), s.key_dim());
                    let mut o = vec![0.0f32; n * s.value_dim()];
                    for (((_, rec, _), span), upd) in seqs.iter_mut().zip(&spans).zip(&upds) {
                        let Some(upd) = *upd else { continue };
                        let cols = span.cols.clone();
                        let b1s = &mut b1[cols.start * ch..cols.end * ch];
                        rec.conv_silu(upd, *slot, conv, b1s);
                        for row in b1s.chunks_exact_mut(ch) {
                            l2_norm_heads(&mut row[..2 * kd], s.head_k_dim, c.eps);
                        }
                        rec.recurrence(
                            exec,
                            upd,
                            *slot,
                            b1s,
                            &b3[cols.start * nv..cols.end * nv],
                            &b4[cols.start * nv..cols.end * nv],
                            &mut o[cols.start * s.value_dim()..cols.end * s.value_dim()],
                        );
                    }
                    // Gated per-head RMSNorm: rmsnorm(o_h) * ssm_norm * silu(z_h).
                    for (oh, zh) in o
                        .chunks_exact_mut(s.head_v_dim)
                        .zip(b2.chunks_exact(s.head_v_dim))
                    {
                        rms_norm(oh, norm, c.eps);
                        oh.iter_mut().zip(zh).for_each(|(v, z)| *v *= silu(*z));
                    }
                    matmuls(
                        exec,
                        fold,
                        self.round_bf16,
                        &o,
                        s.value_dim(),
                        &mut [(out, &mut tmp)],
                    )?;
                }
            }
            x.iter_mut().zip(&tmp).for_each(|(a, b)| *a += b);

            for t in 0..n {
                rms_norm_into(
                    &mut h[t * d..(t + 1) * d],
                    &x[t * d..(t + 1) * d],
                    &l.post_norm,
                    c.eps,
                );
            }
            matmuls(
                exec,
                fold,
                self.round_bf16,
                &h,
                d,
                &mut [(&l.ffn_gate, &mut b1), (&l.ffn_up, &mut b2)],
            )?;
            b1.iter_mut().zip(&b2).for_each(|(a, b)| *a = silu(*a) * b);
            matmuls(
                exec,
                fold,
                self.round_bf16,
                &b1,
                c.n_ff,
                &mut [(&l.ffn_down, &mut tmp)],
            )?;
            x.iter_mut().zip(&tmp).for_each(|(a, b)| *a += b);
        }
        for (((cache, rec, _), span), upd) in seqs.iter_mut().zip(&spans).zip(&upds) {
            if let Some(upd) = *upd {
                cache.set_len(span.pos0 + span.cols.len());
                rec.finish(upd, span.cols.len());
            }
        }
        let (mut last, rows) = output_rows(&x, d, &spans, all_logits);
        for row in last.chunks_exact_mut(d) {
            rms_norm(row, &self.out_norm, c.eps);
        }
        let mut logits = Vec::new();
        match &self.output {
            Some(m) => matmuls(
                exec,
                fold,
                self.round_bf16,
                &last,
                d,
                &mut [(m, &mut logits)],
            )?,
            None => {
                // Tied head: the token table as a matmul; rotated rows need `R` on the input.
                if self.tok_rotated
                    && let Some(f) = fold
                {
                    last = f.apply(exec, FoldKind::Rotate, &last, d).unwrap_or(last);
                }
                logits.resize(last.len() / d * c.n_vocab, 0.0);
                self.tok_embd
                    .forward(exec, &Input::new(&last, d), &mut logits)?;
            }
        }
        Ok(split_logits(&logits, c.n_vocab, &rows))
    }
}
