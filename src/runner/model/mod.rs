//! Forward passes of the architectures the runner implements, on T2P matmuls.
//!
//! [`Model::load`] reads a GGUF file (pq2_0 matrices straight into T2P), picks the architecture
//! and returns the one [`Model`] type, whose [`Model::eval`] evaluates a batch of tokens against
//! a [`Session`] (KV cache, recurrent state for hybrid models, and the buffers of a pass).
//!
//! Where things are: `arch` says what distinguishes each architecture; [`hparams`] reads the
//! hyper-parameters of every architecture; `weights` holds matrices, the loader and the token
//! table / LM head; `blocks` the attention, SwiGLU FFN and Gated DeltaNet layers, each written
//! once; `transformer` builds any architecture as a list of layers and runs the forward pass;
//! `attend` and [`recurrent`] are the attention and DeltaNet inner loops; `state` is the run
//! state a session owns; `exec` where a pass runs (kernels, pool, profile).

mod arch;
mod attend;
mod blocks;
mod error;
mod exec;
pub mod hadamard;
pub mod hparams;
mod kv_cache;
mod linear;
pub mod ops;
pub mod profile;
pub mod recurrent;
mod state;
mod transformer;
mod weights;

use std::path::Path;

pub use attend::{AttnShape, attend};
pub use error::{ModelError, Result};
pub use exec::Exec;
pub use hparams::{DecoderDims, HParams};
pub use kv_cache::KvCache;
pub use linear::Activations;
pub use profile::{Phase, Profile, Traffic};
pub use state::RunState;
pub use transformer::Model;

use recurrent::{RecurrentCheckpoint, RecurrentState};

use crate::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};

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
        let model = Model::new(&gguf, store)?;
        Ok(Loaded {
            model,
            tokenizer,
            gguf,
        })
    }

    /// Vocabulary size (length of a logit row).
    pub fn n_vocab(&self) -> usize {
        self.cfg.n_vocab
    }

    /// Training context length.
    pub fn n_ctx_train(&self) -> usize {
        self.cfg.n_ctx_train
    }

    /// Evaluates `tokens` after what `session` holds; returns a copy of the logits of every
    /// position (`all_logits`, `tokens.len() * n_vocab` values) or of the last one. For tools
    /// and tests; decoding loops use [`eval`](Self::eval), which does not allocate.
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

    /// Evaluates `tokens` after what `session` holds without allocating after the session's
    /// first pass: the logits of every position (`all_logits`) or of the last one stay in the
    /// session (also [`Session::logits`]).
    pub fn eval<'s>(
        &self,
        exec: &Exec,
        session: &'s mut Session,
        tokens: &[u32],
        all_logits: bool,
    ) -> Result<&'s [f32]> {
        self.forward_seqs(exec, &mut [(&mut *session, tokens)], &[all_logits])?;
        Ok(session.logits())
    }

    /// Evaluates several sequences in one pass, each `(session, tokens)` after what its
    /// session holds, and returns a copy of the last position's logits of each (empty for a
    /// sequence without tokens); see [`eval_batch`](Self::eval_batch).
    pub fn forward_batch(
        &self,
        exec: &Exec,
        seqs: &mut [(&mut Session, &[u32])],
    ) -> Result<Vec<Vec<f32>>> {
        self.forward_batch_rows(exec, seqs, &[])
    }

    /// As [`forward_batch`](Self::forward_batch), with every position's logits (`n_vocab`
    /// each, in order) for the sequences `i` with `all_logits[i]` (a sequence past the end of
    /// `all_logits` gets its last position's): a server slot verifying drafted tokens.
    pub fn forward_batch_rows(
        &self,
        exec: &Exec,
        seqs: &mut [(&mut Session, &[u32])],
        all_logits: &[bool],
    ) -> Result<Vec<Vec<f32>>> {
        self.forward_seqs(exec, seqs, all_logits)?;
        Ok(seqs.iter().map(|(s, _)| s.logits().to_vec()).collect())
    }

    /// Evaluates several sequences in one pass and leaves each one's last logits in its
    /// session ([`Session::logits`]). Every matrix runs once over the columns of all
    /// sequences; attention and the recurrent layers run per sequence on its own session. The
    /// logits are bit for bit those of separate [`eval`](Self::eval) calls (a matmul column
    /// and its activation quantization do not depend on the other columns). Allocates nothing
    /// once the first session has seen a batch this large (it holds the batch's buffers).
    pub fn eval_batch(&self, exec: &Exec, seqs: &mut [(&mut Session, &[u32])]) -> Result<()> {
        self.forward_seqs(exec, seqs, &[])
    }
}
