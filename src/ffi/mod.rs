//! The C ABI, declared in `include/t2p.h` (generated from this module by cbindgen).
//!
//! Conventions, the same for every function:
//! * a [`T2pStatus`] is returned (functions that cannot fail say why in their docs);
//! * every pointer is checked for NULL, every shape and buffer length before anything is read
//!   or written; on error nothing is written;
//! * block buffers are passed as `void *` plus their size in bytes, and must be aligned like
//!   their blocks (2 bytes for pq2_0/T2P, 4 for q8_K and q8_K x4), else `T2P_STATUS_MISALIGNED`;
//! * float buffers are passed with their length in elements;
//! * a panic inside the library never unwinds into C: it becomes `T2P_STATUS_PANIC`.
//!
//! Activations: q8_K blocks must be as [`t2p_quantize_q8_K`] writes them, with `bsums` equal to
//! the sums of their `qs` (the SIMD paths take `sum(y)` from `bsums`, as ggml does; inconsistent
//! hand-made blocks give path-dependent results, never undefined behaviour).
//!
//! Matrices: a `rows x k` weight matrix (`rows` a multiple of 4, `k` of 256) is `rows` rows of
//! `k / 128` pq2_0 blocks in the file layout, or the same number of bytes in the T2P layout.
//! Outputs are column-strided: row `r` of column `c` is `out[c * ld_out + r]` (ggml's `dst`).

mod abi;
mod status;

pub use abi::*;
pub use status::T2pStatus;
