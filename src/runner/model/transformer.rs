//! The decoder every architecture is: a token table, a list of layers
//! `{mixer norm, mixer: attention | DeltaNet, FFN norm, FFN}`, a final norm and an LM head.
//! An architecture is an [`Arch`](super::arch::Arch) (its tensor names and options, a few
//! lines in `arch.rs`);
//! this module builds any of them and runs the one forward pass.

use super::arch::ARCHS;
use super::batch::{Batch, Span};
use super::blocks::{
    Attention, Ctx, DeltaNet, Ffn, Layer, Mixer, add, add_norm_rows, norm_rows, project,
};
use super::error::{ModelError, Result};
use super::exec::Exec;
use super::hadamard::HadamardFold;
use super::hparams::HParams;
use super::kv_cache::KvCache;
use super::profile::Phase;
use super::recurrent::RecurrentState;
use super::weights::{Embedding, WeightLoader};
use super::{Logits, Seq, Session};
use crate::runner::{GgufFile, TensorStore};

/// A loaded model of any architecture: the one model type.
pub struct Model {
    /// Hyper-parameters.
    pub cfg: HParams,
    /// Boxed: rarely present.
    fold: Option<Box<HadamardFold>>,
    emb: Embedding,
    layers: Vec<Layer>,
    gated_attention: bool,
    round_bf16: bool,
    /// Sessions keep K and V as f32 instead of f16.
    kv_f32: bool,
}

impl Model {
    /// Builds the model of the file's architecture from its metadata and loaded tensors.
    pub fn new(gguf: &GgufFile, mut store: TensorStore) -> Result<Model> {
        let name = gguf.architecture()?;
        let arch = ARCHS
            .iter()
            .find(|a| a.names.contains(&name))
            .ok_or_else(|| ModelError::UnsupportedArchitecture(name.into()))?;
        let mut cfg = HParams::from_gguf(gguf, &arch.defaults)?;
        let fold = match arch.hadamard {
            true => HadamardFold::from_gguf(gguf)?.map(Box::new),
            false => None,
        };
        let mut weights = WeightLoader::new(&mut store, fold.as_deref());
        let emb = weights.embedding(cfg.dims.n_embd)?;
        cfg.n_vocab = emb.n_vocab;
        let (mut n_attn, mut n_rec) = (0, 0);
        let mut layers = Vec::with_capacity(cfg.dims.n_layer);
        for i in 0..cfg.dims.n_layer {
            let mixer = if cfg.recurrent[i] {
                n_rec += 1;
                Mixer::DeltaNet(DeltaNet::load(&mut weights, i, &cfg, n_rec - 1)?)
            } else {
                n_attn += 1;
                let (qk, gated) = (arch.qk_norm, arch.gated_attention);
                Mixer::Attention(Attention::load(
                    &mut weights,
                    i,
                    &cfg,
                    qk,
                    gated,
                    arch.sub_norms,
                    n_attn - 1,
                )?)
            };
            let norm = |weights: &mut WeightLoader, s: &str| {
                weights.vector(&format!("blk.{i}.{s}.weight"), cfg.dims.n_embd)
            };
            layers.push(Layer {
                mixer_norm: norm(&mut weights, "attn_norm")?,
                mixer,
                ffn_norm: norm(&mut weights, arch.ffn_norm)?,
                ffn: Ffn::load(&mut weights, i, &cfg, arch.ffn_act, arch.sub_norms)?,
            });
        }
        weights.finish()?;
        Ok(Model {
            cfg,
            fold,
            emb,
            layers,
            gated_attention: arch.gated_attention,
            round_bf16: arch.round_bf16,
            kv_f32: false,
        })
    }

    /// Whether activations are rounded to bf16 before a BF16 weight, as llama.cpp's CPU
    /// matmul does (the default of `qwen35`). Off gives the exact-weights (f32) semantics the
    /// F32 twin of a file has, which the `f32` references of the test data use.
    pub fn set_round_bf16_activations(&mut self, on: bool) {
        self.round_bf16 = on;
    }

    /// Whether new sessions keep K and V as f32 (off: f16, llama.cpp's default cache). On gives
    /// the all-f32 semantics of float references: with per-token int8 activations (BitNet), the
    /// f16 rounding of K/V flips some int8 roundings downstream. Attention then runs portable
    /// f32 loops (for checking numerics, not for speed).
    pub fn set_kv_f32(&mut self, on: bool) {
        self.kv_f32 = on;
    }

    /// The parsed Hadamard fold, if the file has one.
    pub fn hadamard(&self) -> Option<&HadamardFold> {
        self.fold.as_deref()
    }

    /// Whether some layers are recurrent (sessions then carry a recurrent state).
    pub fn is_hybrid(&self) -> bool {
        self.cfg.ssm.is_some()
    }

    /// Bytes of weights streamed per decoded token (every matrix once; the token table is a
    /// lookup, except when it is also the LM head).
    pub fn bytes_per_token(&self) -> usize {
        self.layers.iter().map(Layer::bytes).sum::<usize>() + self.emb.head_bytes()
    }

    /// A fresh session for up to `n_ctx` positions.
    pub fn new_session(&self, n_ctx: usize) -> Session {
        let c = &self.cfg;
        Session {
            cache: match self.kv_f32 {
                true => KvCache::new_f32(c.n_attn(), n_ctx, c.dims.n_head_kv, c.dims.head_dim),
                false => KvCache::new(c.n_attn(), n_ctx, c.dims.n_head_kv, c.dims.head_dim),
            },
            recurrent: c.ssm.map(|s| RecurrentState::new(s, c.n_rec())),
            logits: Vec::new(),
        }
    }

    /// The forward pass ([`Model::forward`]), top to bottom, in the batch workspace `st`.
    pub(super) fn run(&self, exec: &Exec, st: &mut Batch, seqs: &mut [Seq]) -> Result<()> {
        let ctx = Ctx {
            exec,
            hp: &self.cfg,
            fold: self.fold.as_deref(),
            round_bf16: self.round_bf16,
        };
        if self.begin(st, seqs)? == 0 {
            seqs.iter_mut().for_each(|s| s.session.logits.clear());
            return Ok(());
        }
        self.embed(&ctx, st, seqs);
        {
            let _t = exec.profile.time(Phase::Elementwise);
            st.rope_tables(&self.cfg);
        }
        // Each residual add runs with the norm that reads its sum: the FFN's with the next
        // layer's mixer norm.
        if let Some(first) = self.layers.first() {
            norm_rows(&ctx, &mut st.xn, &st.x, &first.mixer_norm);
        }
        for (i, layer) in self.layers.iter().enumerate() {
            match &layer.mixer {
                Mixer::Attention(a) => a.forward(&ctx, st, seqs)?,
                Mixer::DeltaNet(g) => g.forward(&ctx, st, seqs)?,
            }
            add_norm_rows(&ctx, &mut st.x, &st.out, &mut st.xn, &layer.ffn_norm);
            layer.ffn.forward(&ctx, st)?;
            match self.layers.get(i + 1) {
                Some(next) => add_norm_rows(&ctx, &mut st.x, &st.out, &mut st.xn, &next.mixer_norm),
                None => add(&ctx, &mut st.x, &st.out),
            }
        }
        for ((seq, span), upd) in seqs.iter_mut().zip(&st.spans).zip(&st.upds) {
            let sess = &mut *seq.session;
            sess.cache.set_len(span.pos0 + span.cols.len());
            if let (Some(u), Some(rec)) = (*upd, sess.recurrent.as_mut()) {
                rec.finish(u, span.cols.len());
            }
        }
        self.logits(&ctx, st, seqs)
    }

    /// Checks every sequence, lays the batch out (`st.spans`, `st.rows`, recurrent updates),
    /// sizes the buffers and returns the batch's token count.
    fn begin(&self, st: &mut Batch, seqs: &mut [Seq]) -> Result<usize> {
        let c = &self.cfg;
        for Seq {
            session: sess,
            tokens,
            ..
        } in seqs.iter()
        {
            let needed = sess.cache.len() + tokens.len();
            if needed > sess.cache.n_ctx() {
                return Err(ModelError::ContextOverflow {
                    needed,
                    n_ctx: sess.cache.n_ctx(),
                });
            }
            if let Some(&id) = tokens.iter().find(|&&id| id as usize >= c.n_vocab) {
                return Err(ModelError::BadToken(id));
            }
            if self.is_hybrid() && sess.recurrent.is_none() {
                return Err(ModelError::BadShape(
                    "a qwen35 session needs a recurrent state".into(),
                ));
            }
        }
        st.spans.clear();
        st.rows.clear();
        let mut at = 0;
        for seq in seqs.iter() {
            let n = seq.tokens.len();
            st.spans.push(Span {
                cols: at..at + n,
                pos0: seq.session.cache.len(),
            });
            st.rows.push(match seq.logits {
                Logits::None => 0,
                Logits::Last => n.min(1),
                Logits::All => n,
            });
            at += n;
        }
        // Room for every sequence's new positions: allocation only, before anything is written.
        for seq in seqs.iter_mut() {
            let needed = seq.session.cache.len() + seq.tokens.len();
            seq.session.cache.reserve(needed);
        }
        // `begin` checks that each state is at its session's position and only allocates (the
        // second buffer of a checkpointed state), so a failure here leaves every state as it was.
        st.upds.clear();
        for (seq, span) in seqs.iter_mut().zip(&st.spans) {
            st.upds.push(match seq.session.recurrent.as_mut() {
                Some(rec) if !span.cols.is_empty() => Some(rec.begin(span.pos0)?),
                _ => None,
            });
        }
        let r = st.rows.iter().sum();
        st.size(c, self.gated_attention, at, r);
        Ok(at)
    }

    /// `st.x[t]` = the embedding of token `t` of the batch.
    fn embed(&self, ctx: &Ctx, st: &mut Batch, seqs: &[Seq]) {
        let _t = ctx.exec.profile.time(Phase::Elementwise);
        let tokens = seqs.iter().flat_map(|s| s.tokens.iter());
        for (row, &id) in st.x.chunks_exact_mut(self.cfg.dims.n_embd).zip(tokens) {
            self.emb.lookup(id, row, self.fold.as_deref());
        }
    }

    /// The final norm and the LM head over the rows each sequence wants; each session gets its
    /// rows of logits. A sequence alone gets them straight from the head; a batch's go through
    /// `st.logits`.
    fn logits(&self, ctx: &Ctx, st: &mut Batch, seqs: &mut [Seq]) -> Result<()> {
        let (d, nv) = (self.cfg.dims.n_embd, self.cfg.n_vocab);
        let mut at = 0;
        for (span, &r) in st.spans.iter().zip(&st.rows) {
            let first = span.cols.end - r;
            let src = &st.x[first * d..span.cols.end * d];
            norm_rows(
                ctx,
                &mut st.head_in[at * d..(at + r) * d],
                src,
                &self.emb.out_norm,
            );
            at += r;
        }
        let out = match seqs {
            [alone] => &mut alone.session.logits,
            _ => &mut st.logits,
        };
        out.resize(at * nv, 0.0);
        if at > 0 {
            let jobs = &mut [(self.emb.head(), &mut out[..])];
            project(ctx, &mut st.mm, &st.head_in, d, jobs, Phase::LmHead)?;
        }
        if seqs.len() > 1 {
            let mut at = 0;
            for (seq, &r) in seqs.iter_mut().zip(&st.rows) {
                let mine = &mut seq.session.logits;
                mine.clear();
                mine.extend_from_slice(&st.logits[at * nv..(at + r) * nv]);
                at += r;
            }
        }
        Ok(())
    }
}
