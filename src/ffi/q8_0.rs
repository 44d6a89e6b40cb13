//! The `q8_0` activation entry points: llama.cpp's activation type for `pq2_0` weights (a scale
//! per 32 values), held four blocks at a time as `t2p_block_q8_0_quad` (one per 128-weight T2P
//! block, 160 bytes, 4-byte aligned).
//!
//! Two ways to fill them: [`t2p_quantize_q8_0`] from floats (the rounding of ggml's x86
//! `quantize_row_q8_0`), or [`t2p_q8_0_from_ggml`] from ggml's own `block_q8_0` data, which
//! makes the activations identical to what ggml's `vec_dot` would see on any platform.

use std::cell::RefCell;
use std::ffi::c_void;

use super::abi::{
    GemmArgs, GemvArgs, blocks, blocks_mut, bytes, bytes_mut, floats_len, row_range, write_out,
};
use super::status::{T2pStatus, guard};
use crate::format::{
    BlockQ8_0Quad, BlockT2p, QK_PQ2_0, QK8_0, ROWS_PER_T2P, f16_to_f32, quantize_row_q8_0,
    t2p_block_count,
};
use crate::kernels::{self, Isa, Kernels};

/// Bytes of one `t2p_block_q8_0_quad` (four q8_0 blocks: 128 activations).
pub const T2P_Q8_0_QUAD_BLOCK_BYTES: usize = 160;
/// Bytes of one ggml `block_q8_0` (32 activations: `{ uint16_t d (fp16); int8_t qs[32]; }`).
pub const T2P_GGML_Q8_0_BLOCK_BYTES: usize = 34;

const _: () = assert!(T2P_Q8_0_QUAD_BLOCK_BYTES == size_of::<BlockQ8_0Quad>());
const _: () = assert!(T2P_GGML_Q8_0_BLOCK_BYTES == 2 + QK8_0);

/// Quad blocks of one column of length `k` (a positive multiple of 128).
fn quads(k: usize) -> Result<usize, T2pStatus> {
    if k == 0 || !k.is_multiple_of(QK_PQ2_0) {
        return Err(T2pStatus::InvalidShape);
    }
    Ok(k / QK_PQ2_0)
}

/// Whether the byte ranges `[a, a + a_len)` and `[b, b + b_len)` overlap.
fn overlap(a: *const c_void, a_len: usize, b: *const c_void, b_len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

/// Bytes of `ncols` activation columns of length `k` (a multiple of 128) as q8_0 quads
/// (`ncols * k / 128` blocks of `T2P_Q8_0_QUAD_BLOCK_BYTES`): the operand of
/// [`t2p_gemv_q8_0`] (one column) and [`t2p_gemm_q8_0`] (columns back to back).
///
/// # Safety
/// `out_bytes` must be NULL (an error) or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_activation_size_q8_0(
    k: usize,
    ncols: usize,
    out_bytes: *mut usize,
) -> T2pStatus {
    guard(|| {
        let per = quads(k)?;
        let n = ncols
            .checked_mul(per * T2P_Q8_0_QUAD_BLOCK_BYTES)
            .ok_or(T2pStatus::InvalidShape)?;
        write_out(out_bytes, n)
    })
}

/// Quantizes `k` floats (`x`, `k` a multiple of 128) to `k / 128` q8_0 quads in `y` (`y_bytes`
/// long, 4-byte aligned), with the rounding of ggml's x86 (AVX/AVX2) `quantize_row_q8_0`: per
/// 32 values `d = fp16(amax / 127)`, `q = round_half_even(x * (127 / amax))`, an all-zero
/// block gives `d = 0`. A batch for [`t2p_gemm_q8_0`] is its columns quantized one after the
/// other (column `c` at `c * k / 128` quads). `x` and `y` must not overlap.
///
/// # Safety
/// `x` must be readable for `k` floats and `y` writable for `y_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_quantize_q8_0(
    x: *const f32,
    k: usize,
    y: *mut c_void,
    y_bytes: usize,
) -> T2pStatus {
    guard(|| {
        let per = quads(k)?;
        floats_len(x, k, k)?;
        if overlap(x.cast(), k * size_of::<f32>(), y, y_bytes) {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: writable for y_bytes by the caller's contract; disjoint from x (checked).
        let y = blocks_mut::<BlockQ8_0Quad>(unsafe { bytes_mut(y, y_bytes) }?, per)?;
        // SAFETY: x is non-null, aligned and readable for k floats (checked / by contract).
        let x = unsafe { std::slice::from_raw_parts(x, k) };
        quantize_row_q8_0(x, y);
        Ok(())
    })
}

/// Converts `k / 32` ggml `block_q8_0` (`src`, `src_bytes`, 2-byte aligned: `{ uint16_t d
/// (fp16); int8_t qs[32]; }` as ggml's `quantize_row_q8_0` writes them) into `k / 128` q8_0
/// quads in `y` (4-byte aligned), exactly: the scales are widened to f32 and the sums computed,
/// the values are copied. `k` is a multiple of 128; the buffers must not overlap.
///
/// This lets a ggml integration use ggml's own quantizer, so that the T2P kernels see the very
/// activations ggml's `vec_dot_pq2_0_q8_0` would see, whatever rounding that platform's
/// quantizer uses.
///
/// # Safety
/// `src` must be readable for `src_bytes` bytes and `y` writable for `y_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_q8_0_from_ggml(
    src: *const c_void,
    src_bytes: usize,
    k: usize,
    y: *mut c_void,
    y_bytes: usize,
) -> T2pStatus {
    guard(|| {
        let per = quads(k)?;
        let need = k / QK8_0 * T2P_GGML_Q8_0_BLOCK_BYTES;
        if src.is_null() || y.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if src_bytes < need {
            return Err(T2pStatus::BufferTooSmall);
        }
        if !(src as usize).is_multiple_of(align_of::<u16>()) {
            return Err(T2pStatus::Misaligned);
        }
        if overlap(src, need, y, y_bytes) {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: readable for src_bytes >= need by the caller's contract.
        let src = unsafe { bytes(src, need) }?;
        // SAFETY: writable for y_bytes by the caller's contract; disjoint from src (checked).
        let y = blocks_mut::<BlockQ8_0Quad>(unsafe { bytes_mut(y, y_bytes) }?, per)?;
        for (quad, chunk) in y
            .iter_mut()
            .zip(src.chunks_exact(4 * T2P_GGML_Q8_0_BLOCK_BYTES))
        {
            let mut qs = [0i8; QK_PQ2_0];
            let mut d = [0.0f32; 4];
            for (j, blk) in chunk.chunks_exact(T2P_GGML_Q8_0_BLOCK_BYTES).enumerate() {
                d[j] = f16_to_f32(u16::from_ne_bytes([blk[0], blk[1]]));
                for (q, &b) in qs[QK8_0 * j..QK8_0 * (j + 1)].iter_mut().zip(&blk[2..]) {
                    *q = b as i8;
                }
            }
            *quad = BlockQ8_0Quad::from_qs(qs, d);
        }
        Ok(())
    })
}

/// Decode with q8_0 activations: `out[r] = sum_k w[r][k] * y[k]` for rows
/// `row_begin..row_end` (multiples of 4) of a `rows x k` T2P matrix `w`, with `y` one column of
/// `k / 128` q8_0 quads (from [`t2p_quantize_q8_0`] or [`t2p_q8_0_from_ggml`]: their `sums`
/// must equal the sums of their values, which the SIMD paths use). Per 128-weight block the
/// float order is ggml's `vec_dot_pq2_0_q8_0`: `acc + d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3)`
/// over the exact 32-weight integer sums, without fused multiply-add, identical on every
/// path. Only `out[row_begin..row_end]` is written (`out_len >= row_end`); threads may call this
/// concurrently on disjoint row ranges of the same `out`.
///
/// # Safety
/// `w`/`y` readable for `w_bytes`/`y_bytes` bytes; `out` writable for `out_len` floats (only
/// the range is touched).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemv_q8_0(
    w: *const c_void,
    w_bytes: usize,
    rows: usize,
    k: usize,
    y: *const c_void,
    y_bytes: usize,
    out: *mut f32,
    out_len: usize,
    row_begin: usize,
    row_end: usize,
) -> T2pStatus {
    let args = GemvArgs {
        w,
        w_bytes,
        rows,
        k,
        y,
        y_bytes,
        out,
        out_len,
        row_begin,
        row_end,
    };
    // SAFETY: the caller's contract is the one gemv_q8_0_with needs.
    guard(|| unsafe { gemv_q8_0_with(kernels::active(), args) })
}

/// [`t2p_gemv_q8_0`] on the scalar oracle, whatever path is active (for exactness checks such
/// as the llama.cpp patch's `T2P_VERIFY`).
///
/// # Safety
/// As for [`t2p_gemv_q8_0`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemv_q8_0_reference(
    w: *const c_void,
    w_bytes: usize,
    rows: usize,
    k: usize,
    y: *const c_void,
    y_bytes: usize,
    out: *mut f32,
    out_len: usize,
    row_begin: usize,
    row_end: usize,
) -> T2pStatus {
    let args = GemvArgs {
        w,
        w_bytes,
        rows,
        k,
        y,
        y_bytes,
        out,
        out_len,
        row_begin,
        row_end,
    };
    // SAFETY: the caller's contract is the one gemv_q8_0_with needs.
    guard(|| unsafe { gemv_q8_0_with(Kernels::for_isa(Isa::Scalar)?, args) })
}

/// The weight blocks of rows `row_begin..row_end` (validated by the caller).
fn row_blocks(w: &[BlockT2p], nb: usize, row_begin: usize, row_end: usize) -> &[BlockT2p] {
    &w[row_begin / ROWS_PER_T2P * nb..row_end / ROWS_PER_T2P * nb]
}

/// # Safety
/// The contract of [`t2p_gemv_q8_0`].
unsafe fn gemv_q8_0_with(kern: &Kernels, a: GemvArgs) -> Result<(), T2pStatus> {
    row_range(a.rows, a.k, a.row_begin, a.row_end)?;
    // SAFETY: readable for w_bytes / y_bytes by the caller's contract.
    let w = blocks::<BlockT2p>(
        unsafe { bytes(a.w, a.w_bytes) }?,
        t2p_block_count(a.rows, a.k)?,
    )?;
    let nb = a.k / QK_PQ2_0;
    // SAFETY: as above.
    let y = blocks::<BlockQ8_0Quad>(unsafe { bytes(a.y, a.y_bytes) }?, nb)?;
    floats_len(a.out, a.out_len, a.row_end)?;
    if a.row_begin == a.row_end {
        return Ok(());
    }
    // SAFETY: row_end <= out_len; only this call's rows are borrowed, so concurrent calls on
    // disjoint row ranges never alias.
    let out =
        unsafe { std::slice::from_raw_parts_mut(a.out.add(a.row_begin), a.row_end - a.row_begin) };
    kern.gemv_q8_0(row_blocks(w, nb, a.row_begin, a.row_end), nb, y, out);
    Ok(())
}

/// Prefill with q8_0 activations: `out[c * ld_out + r] = sum_k w[r][k] * x_c[k]` for rows
/// `row_begin..row_end` (multiples of 4) and `ncols` columns, column `c` being the `k / 128`
/// quads at `y + c * (k / 128)` (see [`t2p_quantize_q8_0`]). Each column is bit-identical to
/// [`t2p_gemv_q8_0`] on it. `ld_out >= rows`; `out_len >= (ncols - 1) * ld_out + row_end`. Only
/// the range's outputs are written, so threads may call this concurrently on disjoint row
/// ranges of the same `out`.
///
/// # Safety
/// `w`/`y` readable for `w_bytes`/`y_bytes` bytes; `out` writable for `out_len` floats.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemm_q8_0(
    w: *const c_void,
    w_bytes: usize,
    rows: usize,
    k: usize,
    y: *const c_void,
    y_bytes: usize,
    ncols: usize,
    out: *mut f32,
    ld_out: usize,
    out_len: usize,
    row_begin: usize,
    row_end: usize,
) -> T2pStatus {
    let args = GemmArgs {
        w,
        w_bytes,
        rows,
        k,
        y,
        y_bytes,
        ncols,
        out,
        ld_out,
        out_len,
        row_begin,
        row_end,
    };
    // SAFETY: the caller's contract is the one gemm_q8_0_with needs.
    guard(|| unsafe { gemm_q8_0_with(kernels::active(), args) })
}

/// [`t2p_gemm_q8_0`] on the scalar oracle, whatever path is active.
///
/// # Safety
/// As for [`t2p_gemm_q8_0`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemm_q8_0_reference(
    w: *const c_void,
    w_bytes: usize,
    rows: usize,
    k: usize,
    y: *const c_void,
    y_bytes: usize,
    ncols: usize,
    out: *mut f32,
    ld_out: usize,
    out_len: usize,
    row_begin: usize,
    row_end: usize,
) -> T2pStatus {
    let args = GemmArgs {
        w,
        w_bytes,
        rows,
        k,
        y,
        y_bytes,
        ncols,
        out,
        ld_out,
        out_len,
        row_begin,
        row_end,
    };
    // SAFETY: the caller's contract is the one gemm_q8_0_with needs.
    guard(|| unsafe { gemm_q8_0_with(Kernels::for_isa(Isa::Scalar)?, args) })
}

/// Columns per kernel call: the gemm kernels share each decoded weight block over 4 columns,
/// so tiles of 4 cost nothing, and the per-thread scratch stays at 4 columns of the range.
const COLS_PER_TILE: usize = 4;

thread_local! {
    static TILE_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// # Safety
/// The contract of [`t2p_gemm_q8_0`].
unsafe fn gemm_q8_0_with(kern: &Kernels, a: GemmArgs) -> Result<(), T2pStatus> {
    row_range(a.rows, a.k, a.row_begin, a.row_end)?;
    if a.ncols == 0 || a.ld_out < a.rows {
        return Err(T2pStatus::InvalidShape);
    }
    // SAFETY: readable for w_bytes / y_bytes by the caller's contract.
    let w = blocks::<BlockT2p>(
        unsafe { bytes(a.w, a.w_bytes) }?,
        t2p_block_count(a.rows, a.k)?,
    )?;
    let nb = a.k / QK_PQ2_0;
    let ny = a.ncols.checked_mul(nb).ok_or(T2pStatus::InvalidShape)?;
    // SAFETY: as above.
    let y = blocks::<BlockQ8_0Quad>(unsafe { bytes(a.y, a.y_bytes) }?, ny)?;
    let need = (a.ncols - 1)
        .checked_mul(a.ld_out)
        .and_then(|v| v.checked_add(a.row_end))
        .ok_or(T2pStatus::InvalidShape)?;
    floats_len(a.out, a.out_len, need)?;
    let n = a.row_end - a.row_begin;
    if n == 0 {
        return Ok(());
    }
    let wr = row_blocks(w, nb, a.row_begin, a.row_end);
    TILE_SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        scratch.resize(COLS_PER_TILE * n, 0.0);
        for c0 in (0..a.ncols).step_by(COLS_PER_TILE) {
            let real = (a.ncols - c0).min(COLS_PER_TILE);
            kern.gemm_q8_0(
                wr,
                nb,
                &y[c0 * nb..(c0 + real) * nb],
                real,
                &mut scratch[..real * n],
                n,
            );
            for c in 0..real {
                // SAFETY: (c0 + c) * ld_out + row_end <= need <= out_len; this column piece of
                // the row range belongs to this call only, so concurrent calls on disjoint
                // ranges never alias.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(a.out.add((c0 + c) * a.ld_out + a.row_begin), n)
                };
                dst.copy_from_slice(&scratch[c * n..(c + 1) * n]);
            }
        }
        Ok(())
    })
}
