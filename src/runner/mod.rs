//! The GGUF side of t2p: a header reader that treats files as hostile ([`GgufFile`]), a loader
//! that streams pq2_0 matrices into T2P without a second copy ([`TensorStore`]), and the
//! tokenizers described by `tokenizer.ggml.*` metadata ([`Tokenizer`]).
//!
//! The forward passes (llama, qwen3, qwen35) build on these three: read the hyper-parameters
//! with the typed getters (`gguf.get_u32(&gguf.arch_key("block_count")?)`), move tensors out of
//! the store with [`TensorStore::take`], and use [`Tensor::dequantize_row`] for embeddings.
//!
//! ```no_run
//! use t2p::runner::{GgufFile, LoadOptions, TensorStore, Tokenizer};
//! let (gguf, store) = TensorStore::load_file("model.gguf", &LoadOptions::default())?;
//! let n_layer = gguf.get_u32(&gguf.arch_key("block_count")?)?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let ids = tok.encode("Once upon a time", true, true);
//! let wq = store.require("blk.0.attn_q.weight")?.as_t2p();
//! # let _ = (n_layer, ids, wq);
//! # Ok::<(), t2p::runner::GgufError>(())
//! ```

pub mod chat;
#[cfg(feature = "grammar")]
pub mod constrain;
pub mod convert;
mod error;
pub mod generate;
mod gguf;
pub mod gguf_writer;
mod loader;
mod memory;
pub mod model;
pub mod perplexity;
pub mod sample;
#[cfg(feature = "server")]
pub mod server;
pub mod speculative;
pub mod step;
mod tensor_info;
pub mod tokenizer;
mod type_ids;

pub use crate::format::GgmlType;
pub use error::{GgufError, Result};
pub use gguf::{
    Array, DEFAULT_ALIGNMENT, GgufFile, MAX_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS, TensorInfo, Value,
};
pub use loader::{
    BlockQ8_0, LoadOptions, LoadProgress, ProgressFn, QK8_0, Tensor, TensorData, TensorStore,
    current_rss_bytes, peak_rss_bytes,
};
pub use tokenizer::{StreamDecoder, TokenType, Tokenizer, TokenizerKind};
