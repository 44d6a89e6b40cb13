//! The dense transformers: `llama` (stories260K, Llama-style models) and `qwen3` (Ternary
//! Bonsai 1.7B/4B/8B: per-head q/k RMSNorm, NeoX RoPE). They differ only in those two points.

use super::attention::{AttnShape, attend};
use super::error::{ModelError, Result};
use super::kv_cache::KvCache;
use super::linear::{Exec, Input, Linear};
use super::ops::{RopeStyle, rms_norm, rms_norm_into, rope, rope_angles, silu};
use crate::runner::{GgufFile, TensorStore};

/// Hyper-parameters of a llama/qwen3 model, read from the GGUF metadata.
#[derive(Clone, Debug)]
pub struct LlamaConfig {
    /// `general.architecture`.
    pub arch: String,
    /// Residual width.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// FFN hidden width.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// KV heads.
    pub n_head_kv: usize,
    /// Values per head.
    pub head_dim: usize,
    /// Dimensions rotated by RoPE (from the start of each head).
    pub rope_dims: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RoPE pairing.
    pub rope_style: RopeStyle,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Training context.
    pub n_ctx_train: usize,
    /// Vocabulary size (rows of the token table).
    pub n_vocab: usize,
}

impl LlamaConfig {
    /// Reads the hyper-parameters of a `llama` or `qwen3` file.
    pub fn from_gguf(gguf: &GgufFile) -> Result<LlamaConfig> {
        let arch = gguf.architecture()?.to_string();
        let rope_style = match arch.as_str() {
            "llama" => RopeStyle::Normal,
            "qwen3" => RopeStyle::Neox,
            other => return Err(ModelError::UnsupportedArchitecture(other.into())),
        };
        let u = |k: &str| -> Result<usize> { Ok(gguf.get_u32(&gguf.arch_key(k)?)? as usize) };
        let opt_u = |k: &str| -> Result<Option<usize>> {
            Ok(gguf.opt_u32(&gguf.arch_key(k)?)?.map(|v| v as usize))
        };
        let n_embd = u("embedding_length")?;
        let n_head = u("attention.head_count")?;
        let n_head_kv = opt_u("attention.head_count_kv")?.unwrap_or(n_head);
        if n_head == 0 || n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(ModelError::BadShape(format!(
                "{n_head} query heads cannot share {n_head_kv} KV heads"
            )));
        }
        let head_dim = opt_u("attention.key_length")?.unwrap_or(n_embd / n_head);
        let rope_dims = opt_u("rope.dimension_count")?.unwrap_or(head_dim);
        if head_dim == 0 || rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(ModelError::BadShape(format!(
                "head_dim {head_dim} with {rope_dims} rotated dimensions"
            )));
        }
        Ok(LlamaConfig {
            n_embd,
            n_layer: u("block_count")?,
            n_ff: u("feed_forward_length")?,
            n_head,
            n_head_kv,
            head_dim,
            rope_dims,
            rope_base: gguf
                .opt_f32(&gguf.arch_key("rope.freq_base")?)?
                .unwrap_or(10000.0),
            rope_style,
            eps: gguf
                .opt_f32(&gguf.arch_key("attention.layer_norm_rms_epsilon")?)?
                .unwrap_or(1e-5),
            n_ctx_train: opt_u("context_length")?.unwrap_or(2048),
            n_vocab: 0,
            arch,
        })
    }
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    wo: Linear,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

/// A loaded llama/qwen3 model: weights and shapes (the KV cache lives in [`KvCache`]).
pub struct Llama {
    /// Hyper-parameters.
    pub cfg: LlamaConfig,
    tok_embd: Linear,
    layers: Vec<Layer>,
    out_norm: Vec<f32>,
    output: Option<Linear>,
}

/// Moves a tensor out of the store, as a matrix of `rows x k`.
pub(crate) fn take_linear(
    store: &mut TensorStore,
    name: &str,
    rows: usize,
    k: usize,
) -> Result<Linear> {
    let t = store
        .take(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let lin = Linear::from_tensor(t)?;
    if lin.rows() != rows || lin.k() != k {
        return Err(ModelError::BadShape(format!(
            "{name} is {} x {}, expected {rows} x {k}",
            lin.rows(),
            lin.k()
        )));
    }
    Ok(lin)
}

/// Moves a 1-D f32-convertible tensor of `n` values out of the store.
pub(crate) fn take_vector(store: &mut TensorStore, name: &str, n: usize) -> Result<Vec<f32>> {
    let t = store
        .take(name)
        .ok_or_else(|| ModelError::MissingTensor(name.into()))?;
    let v = t.to_f32_vec()?;
    if v.len() != n {
        return Err(ModelError::BadShape(format!(
            "{name} has {} values, expected {n}",
            v.len()
        )));
    }
    Ok(v)
}

impl Llama {
    /// Builds the model from the file's metadata and its loaded tensors.
    pub fn new(gguf: &GgufFile, mut store: TensorStore) -> Result<Llama> {
        let mut cfg = LlamaConfig::from_gguf(gguf)?;
        let (d, hd) = (cfg.n_embd, cfg.head_dim);
        let tok = store
            .get("token_embd.weight")
            .ok_or_else(|| ModelError::MissingTensor("token_embd.weight".into()))?;
        cfg.n_vocab = tok.n_rows();
        let tok_embd = take_linear(&mut store, "token_embd.weight", cfg.n_vocab, d)?;
        let qk_norm = cfg.arch == "qwen3";
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let p = |s: &str| format!("blk.{i}.{s}.weight");
                Ok(Layer {
                    attn_norm: take_vector(&mut store, &p("attn_norm"), d)?,
                    wq: take_linear(&mut store, &p("attn_q"), cfg.n_head * hd, d)?,
                    wk: take_linear(&mut store, &p("attn_k"), cfg.n_head_kv * hd, d)?,
                    wv: take_linear(&mut store, &p("attn_v"), cfg.n_head_kv * hd, d)?,
                    wo: take_linear(&mut store, &p("attn_output"), d, cfg.n_head * hd)?,
                    q_norm: if qk_norm {
                        Some(take_vector(&mut store, &p("attn_q_norm"), hd)?)
                    } else {
                        None
                    },
                    k_norm: if qk_norm {
                        Some(take_vector(&mut store, &p("attn_k_norm"), hd)?)
                    } else {
                        None
                    },
                    ffn_norm: take_vector(&mut store, &p("ffn_norm"), d)?,
                    gate: take_linear(&mut store, &p("ffn_gate"), cfg.n_ff, d)?,
                    up: take_linear(&mut store, &p("ffn_up"), cfg.n_ff, d)?,
                    down: take_linear(&mut store, &p("ffn_down"), d, cfg.n_ff)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let out_norm = take_vector(&mut store, "output_norm.weight", d)?;
        let output = match store.get("output.weight") {
            Some(_) => Some(take_linear(&mut store, "output.weight", cfg.n_vocab, d)?),
            None => None, // tied: the token table is the LM head
        };
        Ok(Llama {
            cfg,
            tok_embd,
            layers,
            out_norm,
            output,
        })
    }

    /// A KV cache for `n_ctx` positions.
    pub fn new_cache(&self, n_ctx: usize) -> KvCache {
        KvCache::new(
            self.cfg.n_layer,
            n_ctx,
            self.cfg.n_head_kv * self.cfg.head_dim,
        )
    }

    /// Bytes of weights streamed per decoded token (every matrix once; the token table is a
    /// lookup, except when it is also the LM head).
    pub fn bytes_per_token(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down]
                    .iter()
                    .map(|m| m.size_bytes())
                    .sum::<usize>()
            })
            .sum();
        layers + self.output.as_ref().unwrap_or(&self.tok_embd).size_bytes()
    }

    /// Runs `tokens` at positions `cache.len()..`, appends their K/V to the cache, and returns
    /// the logits of every position (`all_logits`) or of the last one.
    pub fn forward(
        &self,
        exec: &Exec,
        cache: &mut KvCache,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>> {
        let mut out = self.forward_batch(exec, &mut [(cache, tokens)], all_logits)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// [`forward`](Self::forward) for several sequences at once, each `(cache, tokens)` at its
    /// own positions: every matrix runs once over the columns of all sequences (token after
    /// token, sequence after sequence), attention runs per sequence on its own cache. A column
    /// of a matmul does not depend on its neighbours, so each sequence gets exactly the logits
    /// it would get alone. Sequences without tokens get no logits. Nothing is written unless
    /// every sequence fits its cache and every id is in the vocabulary.
    pub fn forward_batch(
        &self,
        exec: &Exec,
        seqs: &mut [(&mut KvCache, &[u32])],
        all_logits: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let c = &self.cfg;
        let (d, hd) = (c.n_embd, c.head_dim);
        for (cache, tokens) in seqs.iter() {
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
        // Column ranges of the sequences and their first positions.
        let spans = batch_spans(seqs.iter().map(|(cache, t)| (cache.len(), t.len())));
        let n: usize = seqs.iter().map(|(_, t)| t.len()).sum();
        if n == 0 {
            return Ok(vec![Vec::new(); seqs.len()]);
        }
        let (q_dim, kv_dim) = (c.n_head * hd, c.n_head_kv * hd);
        let mut x = vec![0.0f32; n * d];
        for (t, &id) in seqs.iter().flat_map(|(_, t)| t.iter()).enumerate() {
            self.tok_embd
                .dequantize_row(id as usize, &mut x[t * d..(t + 1) * d]);
        }
        let mut h = vec![0.0f32; n * d];
        let (mut q, mut k, mut v) = (
            vec![0.0; n * q_dim],
            vec![0.0; n * kv_dim],
            vec![0.0; n * kv_dim],
        );
        let mut attn = vec![0.0f32; n * q_dim];
        let (mut g, mut u) = (vec![0.0f32; n * c.n_ff], vec![0.0f32; n * c.n_ff]);
        let mut tmp = vec![0.0f32; n * d];
        let (mut cos, mut sin) = (vec![0.0f32; c.rope_dims / 2], vec![0.0f32; c.rope_dims / 2]);
        let shape = AttnShape {
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        for (li, l) in self.layers.iter().enumerate() {
            for t in 0..n {
                rms_norm_into(
                    &mut h[t * d..(t + 1) * d],
                    &x[t * d..(t + 1) * d],
                    &l.attn_norm,
                    c.eps,
                );
            }
            let inp = Input::new(&h, d);
            l.wq.forward(exec, &inp, &mut q)?;
            l.wk.forward(exec, &inp, &mut k)?;
            l.wv.forward(exec, &inp, &mut v)?;
            for ((cache, _), span) in seqs.iter_mut().zip(&spans) {
                for t in span.cols.clone() {
                    let pos = span.pos0 + t - span.cols.start;
                    rope_angles(pos, c.rope_dims, c.rope_base, &mut cos, &mut sin);
                    for head in q[t * q_dim..(t + 1) * q_dim].chunks_exact_mut(hd) {
                        if let Some(w) = &l.q_norm {
                            rms_norm(head, w, c.eps);
                        }
                        rope(head, c.rope_dims, c.rope_style, &cos, &sin);
                    }
                    for head in k[t * kv_dim..(t + 1) * kv_dim].chunks_exact_mut(hd) {
                        if let Some(w) = &l.k_norm {
                            rms_norm(head, w, c.eps);
                        }
                        rope(head, c.rope_dims, c.rope_style, &cos, &sin);
                    }
                    cache.store(
                        li,
                        pos,
                        &k[t * kv_dim..(t + 1) * kv_dim],
                        &v[t * kv_dim..(t + 1) * kv_dim],
                    );
                }
                let cols = span.cols.start * q_dim..span.cols.end * q_dim;
                attend(
                    exec,
                    shape,
                    &q[cols.clone()],
                    cache,
                    li,
                    span.pos0,
                    &mut attn[cols],
                );
            }
            l.wo.forward(exec, &Input::new(&attn, q_dim), &mut tmp)?;
            x.iter_mut().zip(&tmp).for_each(|(a, b)| *a += b);

            for t in 0..n {
                rms_norm_into(
                    &mut h[t * d..(t + 1) * d],
                    &x[t * d..(t + 1) * d],
                    &l.ffn_norm,
                    c.eps,
                );
            }
            let inp = Input::new(&h, d);
            l.gate.forward(exec, &inp, &mut g)?;
            l.up.forward(exec, &inp, &mut u)?;
            g.iter_mut().zip(&u).for_each(|(a, b)| *a = silu(*a) * b);
            l.down.forward(exec, &Input::new(&g, c.n_ff), &mut tmp)?;
            x.iter_mut().zip(&tmp).for_each(|(a, b)| *a += b);
        }
        for ((cache, _), span) in seqs.iter_mut().zip(&spans) {
            cache.set_len(span.pos0 + span.cols.len());
        }
        let (mut last, rows) = output_rows(&x, d, &spans, all_logits);
        for row in last.chunks_exact_mut(d) {
            rms_norm(row, &self.out_norm, c.eps);
        }
        let head = self.output.as_ref().unwrap_or(&self.tok_embd);
        let mut logits = vec![0.0f32; last.len() / d * c.n_vocab];
        head.forward(exec, &Input::new(&last, d), &mut logits)?;
        Ok(split_logits(&logits, c.n_vocab, &rows))
    }
}

/// Where one sequence of a batched forward pass sits: its columns in the batch and the
/// position of its first token.
#[derive(Clone, Debug)]
pub(crate) struct Span {
    pub cols: std::ops::Range<usize>,
    pub pos0: usize,
}

/// The spans of sequences given as `(first position, tokens)`, laid out one after another.
pub(crate) fn batch_spans(seqs: impl Iterator<Item = (usize, usize)>) -> Vec<Span> {
    let mut at = 0;
    seqs.map(|(pos0, n)| {
        let s = Span {
            cols: at..at + n,
            pos0,
        };
        at += n;
        s
    })
    .collect()
}

/// The residual rows the LM head reads (every row of each sequence, or its last) and how many
/// of them belong to each sequence.
pub(crate) fn output_rows(
    x: &[f32],
    d: usize,
    spans: &[Span],
    all_logits: bool,
) -> (Vec<f32>, Vec<usize>) {
    let mut rows = Vec::with_capacity(spans.len());
    let mut out = Vec::new();
    for s in spans {
        let cols = match (s.cols.is_empty(), all_logits) {
            (true, _) => s.cols.clone(),
            (false, true) => s.cols.clone(),
            (false, false) => s.cols.end - 1..s.cols.end,
        };
        out.extend_from_slice(&x[cols.start * d..cols.end * d]);
        rows.push(cols.len());
    }
    (out, rows)
}

/// Cuts the logits of the head's rows back into one vector per sequence.
pub(crate) fn split_logits(logits: &[f32], n_vocab: usize, rows: &[usize]) -> Vec<Vec<f32>> {
    let mut at = 0;
    rows.iter()
        .map(|&r| {
            let v = logits[at * n_vocab..(at + r) * n_vocab].to_vec();
            at += r;
            v
        })
        .collect()
}
