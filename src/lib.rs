//! # t2p: ternary language models at the speed of memory
//!
//! PrismML's ternary models store weights as `pq2_0`: 128 weights in 34 bytes (an fp16 scale and
//! 2-bit codes `u = w + 1`). t2p repacks those blocks once, at load, into the **T2P row-pair
//! layout** ([`format::BlockT2p`]), where a single AND extracts 16 weights pre-multiplied by
//! `4^slot`, and runs exact integer kernels on it:
//!
//! * [`format`](mod@format): the GGML type table and the byte layouts (the ternary formats, q8_K, q8_K x4, q8_0, T2P) and the repacks;
//! * [`kernels`]: gemv/gemm per ISA path, the scalar oracle, and runtime dispatch;
//! * [`matmul`]: the weight matrices ([`matmul::Matrix`], one kind a module) and the safe driver
//!   that checks shapes, tiles columns and pads leftovers, and its parallel entry point on
//!   [`pool`], the persistent thread pool;
//! * [`bandwidth`]: the memory-read probe that gives the ceiling kernels are measured against;
//! * [`huge_pages`]: the weights and the bandwidth probe on transparent huge pages;
//! * [`ffi`]: the C ABI (`include/t2p.h`);
//! * `runner` (feature `runner`): the GGUF reader, the T2P loader and the tokenizers;
//! * `testkit` (feature `testkit`, on with `cli`): fixture writers (GGUF files, synthetic models).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod bandwidth;
pub mod error;
pub mod ffi;
pub mod format;
pub mod huge_pages;
pub mod kernels;
pub mod matmul;
pub mod pool;
#[cfg(feature = "runner")]
pub mod runner;
#[cfg(test)]
mod test_rng;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use error::{Error, Result};
