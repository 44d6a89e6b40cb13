//! Forward passes of the architectures the runner implements, on T2P matmuls.
//!
//! [`Model::load`] reads a GGUF file (pq2_0 matrices straight into T2P), picks the architecture
//! and returns a model whose [`Model::forward`] evaluates a batch of tokens against a
//! [`Session`] (KV cache, and recurrent state for hybrid models).

mod attention;
pub mod deltanet;
mod error;
pub mod hadamard;
mod kv_cache;
mod linear;
mod llama;
pub mod ops;
mod qwen35;

use std::path::Path;

pub use attention::{AttnShape, attend};
pub use error::{ModelError, Result};
pub use kv_cache::KvCache;
pub use linear::{Exec, Input, Linear};
pub use llama::{Llama, LlamaConfig};
pub use qwen35::{Qwen35, Qwen35Config};

use deltanet::{RecurrentCheckpoint, RecurrentState};

use crate::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};

/// A model of any supported architecture.
pub enum Model {
    /// `llama` or `qwen3`.
    Llama(Llama),
    /// `qwen35` (Gated DeltaNet + gated attention hybrid).
    Qwen35(Qwen35),
}

/// Per-sequence state: the position, the KV cache and, for hybrid models, the recurrent state.
pub struct Session {
    /// Attention K/V.
    pub cache: KvCache,
    /// Conv + SSM state of the recurrent layers (`None` for attention-only models).
    pub recurrent: Option<RecurrentState>,
}

/// A point a [`Session`] can return to with [`Session::rollback`].
#[derive(Clone, Copy, Debug)]
pub struct Checkpoint {
    len: usize,
    recurrent: Option<RecurrentCheckpoint>,
}

impl Checkpoint {
    /// Tokens the session held at the checkpoint.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the checkpoint is at the start of the sequence.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Session {
    /// Tokens evaluated so far.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing was evaluated yet.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Forgets everything from position `len` on. Attention-only sessions can truncate
    /// anywhere. A recurrent state cannot be rewound: hybrid sessions truncated to 0 start
    /// over, to any other shorter length they refuse the next forward pass until a
    /// [`rollback`](Self::rollback) or a truncation to 0 (use [`checkpoint`](Self::checkpoint)).
    pub fn truncate(&mut self, len: usize) {
        if len < self.cache.len()
            && let Some(r) = &mut self.recurrent
        {
            if len == 0 {
                r.reset();
            } else {
                r.invalidate();
            }
        }
        self.cache.truncate(len);
    }

    /// Marks the current point to return to, in O(1) (for speculative decoding). For hybrid
    /// models only the latest checkpoint stays valid.
    pub fn checkpoint(&mut self) -> Checkpoint {
        Checkpoint {
            len: self.cache.len(),
            recurrent: self.recurrent.as_mut().map(|r| r.checkpoint()),
        }
    }

    /// Returns to `cp` in O(1): the KV cache is truncated, the recurrent state switched back.
    /// A checkpoint can be rolled back to any number of times until the next checkpoint.
    pub fn rollback(&mut self, cp: &Checkpoint) -> Result<()> {
        if cp.len > self.cache.len() {
            return Err(ModelError::BadShape(format!(
                "checkpoint at {} is past the session's {} tokens",
                cp.len,
                self.cache.len()
            )));
        }
        match (&mut self.recurrent, &cp.recurrent) {
            (Some(r), Some(c)) => r.rollback(c)?,
            (None, None) => {}
            _ => {
                return Err(ModelError::BadShape(
                    "checkpoint of another kind of session".into(),
                ));
            }
        }
        self.cache.truncate(cp.len);
        Ok(())
    }
}

/// A loaded model with its tokenizer and file metadata.
pub struct Loaded {
    /// The model.
    pub model: Model,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// The file's header and metadata.
    pub gguf: GgufFile,
}

impl Model {
    /// Loads `path`: tensors (pq2_0 repacked to T2P as they stream in), tokenizer, model.
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Loaded> {
        let (gguf, store) = TensorStore::load_file(path, opts)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let model = match gguf.architecture()? {
            "llama" | "qwen3" => Model::Llama(Llama::new(&gguf, store)?),
            "qwen35" => Model::Qwen35(Qwen35::new(&gguf, store)?),
            other => return Err(ModelError::UnsupportedArchitecture(other.into())),
        };
        Ok(Loaded {
            model,
            tokenizer,
            gguf,
        })
    }

    /// Vocabulary size (length of a logit row).
    pub fn n_vocab(&self) -> usize {
        match self {
            Model::Llama(m) => m.cfg.n_vocab,
            Model::Qwen35(m) => m.cfg.n_vocab,
        }
    }

    /// Training context length.
    pub fn n_ctx_train(&self) -> usize {
        match self {
            Model::Llama(m) => m.cfg.n_ctx_train,
            Model::Qwen35(m) => m.cfg.n_ctx_train,
        }
    }

    /// Bytes of weights streamed per decoded token.
    pub fn bytes_per_token(&self) -> usize {
        match self {
            Model::Llama(m) => m.bytes_per_token(),
            Model::Qwen35(m) => m.bytes_per_token(),
        }
    }

    /// A fresh session for up to `n_ctx` positions.
    pub fn new_session(&self, n_ctx: usize) -> Session {
        match self {
            Model::Llama(m) => Session {
                cache: m.new_cache(n_ctx),
                recurrent: None,
            },
            Model::Qwen35(m) => Session {
                cache: m.new_cache(n_ctx),
                recurrent: Some(m.new_recurrent_state()),
            },
        }
    }

    /// Evaluates `tokens` after what `session` holds; returns the logits of every position
    /// (`all_logits`, `tokens.len() * n_vocab` values) or of the last one.
    pub fn forward(
        &self,
        exec: &Exec,
        session: &mut Session,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = self.forward_batch_with(exec, &mut [(session, tokens)], all_logits)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Evaluates several sequences in one pass, each `(session, tokens)` after what its
    /// session holds, and returns the last position's logits of each (empty for a sequence
    /// without tokens). Every matrix runs once over the columns of all sequences; attention
    /// and the recurrent layers run per sequence on its own session. The logits are bit for
    /// bit those of separate [`forward`](Self::forward) calls (a matmul column and its
    /// activation quantization do not depend on the other columns).
    pub fn forward_batch(
        &self,
        exec: &Exec,
        seqs: &mut [(&mut Session, &[u32])],
    ) -> Result<Vec<Vec<f32>>> {
        self.forward_batch_with(exec, seqs, false)
    }

    fn forward_batch_with(
        &self,
        exec: &Exec,
        seqs: &mut [(&mut Session, &[u32])],
        all_logits: bool,
    ) -> Result<Vec<Vec<f32>>> {
        match self {
            Model::Llama(m) => {
                let mut s: Vec<(&mut KvCache, &[u32])> = seqs
                    .iter_mut()
                    .map(|(sess, t)| (&mut sess.cache, *t))
                    .collect();
                m.forward_batch(exec, &mut s, all_logits)
            }
            Model::Qwen35(m) => {
                let mut s = Vec::with_capacity(seqs.len());
                for (sess, t) in seqs.iter_mut() {
                    let rec = sess.recurrent.as_mut().ok_or_else(|| {
                        ModelError::BadShape("a qwen35 session needs a recurrent state".into())
                    })?;
                    s.push((&mut sess.cache, rec, *t));
                }
                m.forward_batch(exec, &mut s, all_logits)
            }
        }
    }
}
