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
//! Activations: q8_K blocks must be as [`t2p_quantize_q8_K`] writes them, with `bsums` equal to
//! the sums of their `qs` (the SIMD paths take `sum(y)` from `bsums`, as ggml does; inconsistent
//! hand-made blocks give path-dependent results, never undefined behaviour). Two activation
//! types: q8_K (a scale per 256 values; [`t2p_gemv`], [`t2p_gemm`]) and q8_0 (a scale per 32,
//! llama.cpp's type for pq2_0; [`t2p_gemv_q8_0`], [`t2p_gemm_q8_0`]), whose quads carry
//! `sums` that must likewise equal the sums of their `qs`.
//!
//! Matrices: a `rows x k` weight matrix (`rows` a multiple of 4, `k` of 256) is `rows` rows of
//! `k / 128` pq2_0 blocks in the file layout, or the same number of bytes in the T2P layout.
//! Outputs are column-strided: row `r` of column `c` is `out[c * ld_out + r]` (ggml's `dst`).

mod abi;
mod q8_0;
mod status;
mod unpack;

pub use abi::*;
pub use q8_0::*;
pub use status::T2pStatus;
pub use unpack::*;
