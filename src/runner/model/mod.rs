//! Forward passes of the architectures the runner implements, on T2P matmuls.
//!
//! [`Model::load`] reads a GGUF file (pq2_0 matrices straight into T2P), picks the architecture
//! and returns a model whose [`Model::forward`] evaluates a batch of tokens against a
//! [`Session`] (KV cache, and recurrent state for hybrid models).

mod attention;
mod error;
mod kv_cache;
mod linear;
mod llama;
pub mod ops;

use std::path::Path;

pub use attention::{AttnShape, attend};
pub use error::{ModelError, Result};
pub use kv_cache::KvCache;
pub use linear::{Exec, Input, Linear};
pub use llama::{Llama, LlamaConfig};

use crate::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};

/// A model of any supported architecture.
pub enum Model {
    /// `llama` or `qwen3`.
    Llama(Llama),
}

/// Per-sequence state: the position and the KV cache.
pub struct Session {
    /// Attention K/V.
    pub cache: KvCache,
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

    /// Forgets everything from position `len` on (for rollback).
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len);
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
        }
    }

    /// Training context length.
    pub fn n_ctx_train(&self) -> usize {
        match self {
            Model::Llama(m) => m.cfg.n_ctx_train,
        }
    }

    /// Bytes of weights streamed per decoded token.
    pub fn bytes_per_token(&self) -> usize {
        match self {
            Model::Llama(m) => m.bytes_per_token(),
        }
    }

    /// A fresh session for up to `n_ctx` positions.
    pub fn new_session(&self, n_ctx: usize) -> Session {
        match self {
            Model::Llama(m) => Session {
                cache: m.new_cache(n_ctx),
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
        match self {
            Model::Llama(m) => m.forward(exec, &mut session.cache, tokens, all_logits),
        }
    }
}
