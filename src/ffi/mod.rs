//! The C ABI, declared in `include/t2p.h` (generated from this module by cbindgen).
//!
//! Conventions, the same for every function:
//! * a [`T2pStatus`] is returned (functions that cannot fail say why in their docs);
//! * every pointer is checked for NULL, every shape and buffer length before anything is read
//!   or written; on error nothing is written;
//! * block buffers are passed as `void *` plus their size in bytes, and must be aligned like
//!   their blocks (2 bytes for pq2_0/T2P/tq*/ggml `block_q8_0`, 4 for q8_K, q8_K x4 and q8_0
//!   quads), else `T2P_STATUS_MISALIGNED`;
//! * float buffers are passed with their length in elements;
//! * a panic inside the library never unwinds into C: it becomes `T2P_STATUS_PANIC`.
//!
//! Matmuls go through one plan ([`T2pPlan`]): [`t2p_plan_init`] (shape, activation type,
//! columns, work size), [`t2p_plan_quantize`] (a share of the activations per thread),
//! [`t2p_plan_chunk_count`] / [`t2p_plan_chunk_rows`] (the row split) and
//! [`t2p_plan_compute`] (a row range, on the active path or any other, the scalar oracle
//! included). The Rust runner runs the same driver ([`crate::matmul::MatmulPlan`]).
//!
//! Matrices: a `rows x k` weight matrix (`rows` positive, `k` a multiple of 128) is `rows`
//! rows of `k / 128` pq2_0 blocks in the file layout; its T2P layout is `ceil(rows / 4)` row
//! groups of `k / 128` 136-byte blocks (a last group of fewer than 4 rows padded with zero
//! rows). Outputs are column-strided: row `r` of column `c` is `out[c * ld_out + r]` (ggml's
//! `dst`).

mod abi;
mod plan;
mod status;
mod unpack;

pub use abi::*;
pub use plan::*;
pub use status::T2pStatus;
pub use unpack::*;
