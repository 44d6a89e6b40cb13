//! Errors of building and running a model.

use std::fmt;

use crate::runner::GgufError;

/// Why a model could not be built or evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelError {
    /// Reading the file or its metadata failed.
    Gguf(GgufError),
    /// The kernels refused a shape (a bug if the model was built by [`super::Model::load`]).
    Kernel(crate::Error),
    /// The architecture is not one this runner implements.
    UnsupportedArchitecture(String),
    /// A tensor the architecture needs is absent.
    MissingTensor(String),
    /// A tensor or hyper-parameter has a shape or value the architecture cannot use.
    BadShape(String),
    /// The tokens do not fit in the context.
    ContextOverflow {
        /// Tokens already in the cache plus those requested.
        needed: usize,
        /// The context size.
        n_ctx: usize,
    },
    /// A token id at or past the vocabulary size.
    BadToken(u32),
    /// A grammar constraining the output failed.
    Grammar(String),
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Gguf(e) => write!(f, "{e}"),
            ModelError::Kernel(e) => write!(f, "kernel: {e}"),
            ModelError::UnsupportedArchitecture(a) => {
                write!(
                    f,
                    "unsupported architecture {a:?} (supported: llama, qwen3, qwen35)"
                )
            }
            ModelError::MissingTensor(n) => write!(f, "missing tensor {n:?}"),
            ModelError::BadShape(m) => write!(f, "bad shape: {m}"),
            ModelError::ContextOverflow { needed, n_ctx } => {
                write!(f, "{needed} tokens do not fit in the context of {n_ctx}")
            }
            ModelError::BadToken(t) => write!(f, "token id {t} is outside the vocabulary"),
            ModelError::Grammar(e) => write!(f, "grammar: {e}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<GgufError> for ModelError {
    fn from(e: GgufError) -> Self {
        ModelError::Gguf(e)
    }
}

impl From<crate::Error> for ModelError {
    fn from(e: crate::Error) -> Self {
        ModelError::Kernel(e)
    }
}

/// Shorthand for model results.
pub type Result<T> = std::result::Result<T, ModelError>;
