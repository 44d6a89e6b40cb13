//! Forward passes of the architectures the runner implements, on T2P matmuls.
//!
//! [`Model::load`] reads a GGUF file (pq2_0 matrices straight into T2P), picks the architecture
//! and returns the one [`Model`] type. Its one entry, [`Model::forward`], runs a batch of
//! sequences ([`Seq`]: a [`Session`] holding the KV cache, recurrent state for hybrid models and
//! logits, the tokens to run after it, and the [`Logits`] wanted back) on an [`Exec`], which
//! owns the buffers of the batch.
//!
//! Where things are: `arch` says what distinguishes each architecture; [`hparams`] reads the
//! hyper-parameters of every architecture; `weights` holds matrices, the loader and the token
//! table / LM head; `blocks` the attention, SwiGLU FFN and Gated DeltaNet layers, each written
//! once; `transformer` builds any architecture as a list of layers and runs the forward pass;
//! `attend` and [`recurrent`] are the attention and DeltaNet inner loops; `batch` the buffers a
//! pass works in; `exec` where a pass runs (kernels, pool, profile, those buffers).

mod arch;
mod attend;
mod batch;
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
pub use transformer::Model;

use recurrent::{RecurrentCheckpoint, RecurrentState};

use crate::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};

/// Per-sequence state: the position, the KV cache, for hybrid models the recurrent state, and
/// the logits of the latest forward pass. Cloning it forks the sequence.
#[derive(Clone)]
pub struct Session {
    /// Attention K/V.
    pub cache: KvCache,
    /// Conv + SSM state of the recurrent layers (`None` for attention-only models).
    pub recurrent: Option<RecurrentState>,
    /// `[rows][n_vocab]`: the rows the latest pass gave this session (see [`Logits`]).
    logits: Vec<f32>,
}

/// Which logits a sequence wants back from a forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prompt chunk with more to follow): the LM head skips the sequence.
    None,
    /// The last position's: what sampling the next token reads.
    Last,
    /// Every position's, in order: checking drafted tokens, perplexity, tests.
    All,
}

/// One sequence of a forward pass: its session, the tokens it runs after what the session
/// holds, and the logits it wants, which the pass leaves in the session ([`Session::logits`]).
pub struct Seq<'a> {
    /// The sequence's state, extended by the pass.
    pub session: &'a mut Session,
    /// The tokens to run (none: the sequence sits this pass out).
    pub tokens: &'a [u32],
    /// Which logits to keep.
    pub logits: Logits,
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
    /// The logits of the latest forward pass over this session, as its [`Seq::logits`] asked:
    /// `n_vocab` values per row, empty when it had no tokens or asked for none.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Tokens evaluated so far.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing was evaluated yet.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// A copy of what the session holds now and nothing more: the filled K/V rows and the
    /// current recurrent state, without logits or a checkpoint. Evaluating after it gives the
    /// logits the session itself would give (what a prompt cache restores).
    pub fn snapshot(&self) -> Session {
        Session {
            cache: self.cache.compact(),
            recurrent: self.recurrent.as_ref().map(RecurrentState::compact),
            logits: Vec::new(),
        }
    }

    /// What a prompt cache keeps of a session it takes over, without copying the K/V: the
    /// filled rows (the room past them given back), the current recurrent state, no logits.
    /// The same contents as [`snapshot`](Self::snapshot).
    pub fn into_snapshot(mut self) -> Session {
        self.cache.shrink_to_len();
        Session {
            cache: self.cache,
            recurrent: self.recurrent.as_ref().map(RecurrentState::compact),
            logits: Vec::new(),
        }
    }

    /// A copy of the first `n` positions, as [`snapshot`](Self::snapshot) of a session that
    /// had evaluated only those; `None` where that cannot be had: a recurrent state is the
    /// state after all of them, so a hybrid session gives only its whole self.
    pub fn prefix(&self, n: usize) -> Option<Session> {
        if self.recurrent.is_some() && n != self.len() {
            return None;
        }
        Some(Session {
            cache: self.cache.compact_prefix(n),
            recurrent: self.recurrent.as_ref().map(RecurrentState::compact),
            logits: Vec::new(),
        })
    }

    /// Bytes the session's buffers hold (K/V, recurrent state, logits).
    pub fn size_bytes(&self) -> usize {
        self.cache.size_bytes()
            + self
                .recurrent
                .as_ref()
                .map_or(0, RecurrentState::size_bytes)
            + self.logits.len() * size_of::<f32>()
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

    /// Runs every sequence of `seqs` after what its session holds, in one pass: each matrix
    /// once over the columns of all sequences; attention and the recurrent layers per sequence
    /// on its own session. Each session keeps the logits its [`Seq::logits`] asks for, bit for
    /// bit those it would get alone (a matmul column and its activation quantization do not
    /// depend on the other columns). Nothing is written unless every sequence fits its
    /// context, every id is in the vocabulary and every recurrent state is at its position.
    /// Allocates nothing once `exec` has run a batch this large and each session has held
    /// logits this large.
    pub fn forward(&self, exec: &Exec, seqs: &mut [Seq]) -> Result<()> {
        if seqs.is_empty() {
            return Ok(());
        }
        let t = exec.profile.time(Phase::Forward);
        let res = self.run(exec, &mut exec.batch(), seqs);
        drop(t);
        res
    }

    /// One sequence alone: [`forward`](Self::forward) over `[Seq { session, tokens, logits }]`,
    /// returning the session's logits. Most passes run one sequence (decoding loops, tools,
    /// tests); this spares each of them the one-element batch and the separate read.
    pub fn forward_one<'s>(
        &self,
        exec: &Exec,
        session: &'s mut Session,
        tokens: &[u32],
        logits: Logits,
    ) -> Result<&'s [f32]> {
        let seq = Seq {
            session: &mut *session,
            tokens,
            logits,
        };
        self.forward(exec, &mut [seq])?;
        Ok(session.logits())
    }
}
