//! Forward passes of the architectures the runner implements, on T2P matmuls.
//!
//! [`Model::load`] reads a GGUF file (pq2_0 matrices straight into T2P), picks the architecture
//! and returns a model whose [`Model::forward`] evaluates a batch of tokens against a
//! [`Session`] (KV cache, recurrent state for hybrid models, and the buffers of a pass).
//!
//! Where things are: [`hparams`] reads the hyper-parameters of every architecture; `weights`
//! holds matrices, the loader and the token table / LM head; `blocks` the attention, SwiGLU
//! FFN and Gated DeltaNet blocks, each written once; `transformer` builds any architecture
//! as a list of layers and runs the forward pass; `llama.rs` and `qwen35.rs` only say what
//! distinguishes their architectures; `state` is the run state a session owns.

mod attention;
mod blocks;
pub mod deltanet;
mod error;
pub mod hadamard;
pub mod hparams;
mod kv_cache;
mod linear;
mod llama;
pub mod ops;
pub mod profile;
mod qwen35;
mod state;
mod transformer;
mod weights;

use std::path::Path;

pub use attention::{AttnShape, attend};
pub use error::{ModelError, Result};
pub use hparams::HParams;
pub use kv_cache::KvCache;
pub use linear::{Activations, Exec, Linear};
pub use profile::{Phase, Profile};
pub use state::RunState;
pub use transformer::Transformer;

use deltanet::{RecurrentCheckpoint, RecurrentState};

use crate::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};

/// A `llama` or `qwen3` model (the same [`Transformer`] as every architecture).
pub type Llama = Transformer;
/// A `qwen35` model (the same [`Transformer`] as every architecture).
pub type Qwen35 = Transformer;

/// A model of any supported architecture. Both variants hold the same [`Transformer`]; the
/// variant says whether sessions carry a recurrent state.
pub enum Model {
    /// Attention only: `llama` or `qwen3`.
    Llama(Llama),
    /// Hybrid: `qwen35` (Gated DeltaNet + gated attention).
    Qwen35(Qwen35),
}

/// Per-sequence state: the position, the KV cache, for hybrid models the recurrent state, and
/// the buffers of a forward pass (sized by the first one).
pub struct Session {
    /// Attention K/V.
    pub cache: KvCache,
    /// Conv + SSM state of the recurrent layers (`None` for attention-only models).
    pub recurrent: Option<RecurrentState>,
    /// Buffers of the forward pass, and the logits of the latest one.
    state: RunState,
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
    /// The logits of the latest forward pass over this session ([`Model::eval`],
    /// [`Model::eval_batch`]): `n_vocab` values per row, empty when it had no tokens.
    pub fn logits(&self) -> &[f32] {
        &self.state.logits
    }

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
        let net = Transformer::new(&gguf, store)?;
        let model = match net.is_hybrid() {
            true => Model::Qwen35(net),
            false => Model::Llama(net),
        };
        Ok(Loaded {
            model,
            tokenizer,
            gguf,
        })
    }

    /// The model.
    pub fn net(&self) -> &Transformer {
        match self {
            Model::Llama(m) | Model::Qwen35(m) => m,
        }
    }

    /// Vocabulary size (length of a logit row).
    pub fn n_vocab(&self) -> usize {
        self.net().cfg.n_vocab
    }

    /// Training context length.
    pub fn n_ctx_train(&self) -> usize {
        self.net().cfg.n_ctx_train
    }

    /// Bytes of weights streamed per decoded token.
    pub fn bytes_per_token(&self) -> usize {
        self.net().bytes_per_token()
    }

    /// A fresh session for up to `n_ctx` positions.
    pub fn new_session(&self, n_ctx: usize) -> Session {
        self.net().new_session(n_ctx)
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
        Ok(self.eval(exec, session, tokens, all_logits)?.to_vec())
    }

    /// [`forward`](Self::forward) without allocating after the session's first pass: the
    /// logits stay in the session (also [`Session::logits`]).
    pub fn eval<'s>(
        &self,
        exec: &Exec,
        session: &'s mut Session,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<&'s [f32]> {
        self.net()
            .forward(exec, &mut [(&mut *session, tokens)], all_logits)?;
        Ok(session.logits())
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
        self.eval_batch(exec, seqs)?;
        Ok(seqs.iter().map(|(s, _)| s.logits().to_vec()).collect())
    }

    /// [`forward_batch`](Self::forward_batch) leaving each sequence's logits in its session
    /// ([`Session::logits`]); allocates nothing once the first session has seen a batch this
    /// large (it holds the batch's buffers).
    pub fn eval_batch(&self, exec: &Exec, seqs: &mut [(&mut Session, &[u32])]) -> Result<()> {
        self.net().forward(exec, seqs, false)
    }
}
