//! The exported functions. Each body validates its arguments, then calls the safe library.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};

use bytemuck::Pod;

use super::status::{T2pStatus, guard};
use crate::format::{
    BlockPq2_0, BlockQ8K, BlockQ8Kx4, BlockT2p, QK_K, QK_PQ2_0, check_matrix_shape,
    quantize_q8k_x4, quantize_row_q8k, repack_pq2_0_in_place, repack_pq2_0_to_t2p, t2p_block_count,
    unpack_t2p_to_pq2_0,
};
use crate::format::{BlockPtq1_0, BlockTq1_0, BlockTq2_0, TernaryBlock, repack_to_t2p};
use crate::kernels::{self, Isa, Kernels, cpu};
use crate::matmul::{gemm_range, gemv_range};

/// Scalar path (always available).
pub const T2P_ISA_SCALAR: u32 = 0;
/// x86_64 AVX2 path.
pub const T2P_ISA_AVX2: u32 = 1;
/// aarch64 NEON path without dotprod.
pub const T2P_ISA_NEON: u32 = 2;
/// aarch64 NEON + dotprod path.
pub const T2P_ISA_NEON_DOTPROD: u32 = 3;
/// aarch64 NEON + dotprod + i8mm path.
pub const T2P_ISA_NEON_I8MM: u32 = 4;
/// x86_64 AVX2 + F16C + AVX-VNNI path.
pub const T2P_ISA_AVX_VNNI: u32 = 5;

/// CPU feature bit: x86_64 AVX2.
pub const T2P_CPU_AVX2: u32 = 1 << 0;
/// CPU feature bit: x86_64 FMA.
pub const T2P_CPU_FMA: u32 = 1 << 1;
/// CPU feature bit: x86_64 F16C.
pub const T2P_CPU_F16C: u32 = 1 << 2;
/// CPU feature bit: x86_64 AVX-512F (reported only; no kernel uses it).
pub const T2P_CPU_AVX512F: u32 = 1 << 3;
/// CPU feature bit: aarch64 Advanced SIMD.
pub const T2P_CPU_NEON: u32 = 1 << 8;
/// CPU feature bit: aarch64 dot product.
pub const T2P_CPU_DOTPROD: u32 = 1 << 9;
/// CPU feature bit: aarch64 int8 matrix multiply.
pub const T2P_CPU_I8MM: u32 = 1 << 10;

/// Source format: PrismML pq2_0 (GGML type 142).
pub const T2P_TYPE_PQ2_0: u32 = 142;
/// Source format: legacy PrismML "Q2_0 group 128" (GGML type 42 with 34-byte blocks; the same
/// bytes as pq2_0).
pub const T2P_TYPE_Q2_0_G128: u32 = 42;
/// Source format: llama.cpp tq1_0 (GGML type 34, 256 weights in 54 bytes).
pub const T2P_TYPE_TQ1_0: u32 = 34;
/// Source format: llama.cpp tq2_0 (GGML type 35, 256 weights in 66 bytes).
pub const T2P_TYPE_TQ2_0: u32 = 35;
/// Source format: PrismML ptq1_0 (GGML type 143, 128 weights in 28 bytes). Its element order
/// comes from third-party reports and has not yet been checked against a real file.
pub const T2P_TYPE_PTQ1_0: u32 = 143;

/// Bytes of one pq2_0 block (128 weights).
pub const T2P_PQ2_0_BLOCK_BYTES: usize = 34;
/// Bytes of one T2P block (4 rows x 128 weights).
pub const T2P_T2P_BLOCK_BYTES: usize = 136;
/// Bytes of one q8_K block (256 activations).
pub const T2P_Q8_K_BLOCK_BYTES: usize = 292;
/// Bytes of one q8_K x4 block (4 columns x 256 activations).
pub const T2P_Q8_K_X4_BLOCK_BYTES: usize = 1168;

// The header carries these as literals; they must agree with the Rust definitions.
const _: () = {
    assert!(T2P_ISA_SCALAR == Isa::Scalar as u32 && T2P_ISA_AVX2 == Isa::Avx2 as u32);
    assert!(T2P_ISA_NEON == Isa::Neon as u32 && T2P_ISA_NEON_DOTPROD == Isa::NeonDotprod as u32);
    assert!(T2P_ISA_NEON_I8MM == Isa::NeonI8mm as u32 && T2P_ISA_AVX_VNNI == Isa::AvxVnni as u32);
    assert!(T2P_CPU_AVX2 == cpu::AVX2 && T2P_CPU_FMA == cpu::FMA && T2P_CPU_F16C == cpu::F16C);
    assert!(T2P_CPU_AVX512F == cpu::AVX512F && T2P_CPU_NEON == cpu::NEON);
    assert!(T2P_CPU_DOTPROD == cpu::DOTPROD && T2P_CPU_I8MM == cpu::I8MM);
    assert!(
        T2P_PQ2_0_BLOCK_BYTES == size_of::<BlockPq2_0>()
            && T2P_T2P_BLOCK_BYTES == size_of::<BlockT2p>()
    );
    assert!(
        T2P_Q8_K_BLOCK_BYTES == size_of::<BlockQ8K>()
            && T2P_Q8_K_X4_BLOCK_BYTES == size_of::<BlockQ8Kx4>()
    );
};

/// A byte view of a C buffer, or the status explaining why there is none.
///
/// # Safety
/// `p` must be NULL or valid for reads of `len` bytes for the returned lifetime.
pub(super) unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], T2pStatus> {
    if p.is_null() {
        return Err(T2pStatus::NullPointer);
    }
    // SAFETY: non-null and, by the caller's contract, valid for `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// A mutable byte view of a C buffer.
///
/// # Safety
/// `p` must be NULL or valid for reads and writes of `len` bytes, not aliased elsewhere.
pub(super) unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], T2pStatus> {
    if p.is_null() {
        return Err(T2pStatus::NullPointer);
    }
    // SAFETY: non-null and, by the caller's contract, valid and unaliased for `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// The first `n` blocks of a byte buffer, checking its length and alignment.
pub(super) fn blocks<T: Pod>(buf: &[u8], n: usize) -> Result<&[T], T2pStatus> {
    let need = n
        .checked_mul(size_of::<T>())
        .ok_or(T2pStatus::InvalidShape)?;
    if buf.len() < need {
        return Err(T2pStatus::BufferTooSmall);
    }
    bytemuck::try_cast_slice(&buf[..need]).map_err(|_| T2pStatus::Misaligned)
}

pub(super) fn blocks_mut<T: Pod>(buf: &mut [u8], n: usize) -> Result<&mut [T], T2pStatus> {
    let need = n
        .checked_mul(size_of::<T>())
        .ok_or(T2pStatus::InvalidShape)?;
    if buf.len() < need {
        return Err(T2pStatus::BufferTooSmall);
    }
    bytemuck::try_cast_slice_mut(&mut buf[..need]).map_err(|_| T2pStatus::Misaligned)
}

pub(super) fn floats_len(p: *const f32, len: usize, need: usize) -> Result<(), T2pStatus> {
    if p.is_null() {
        return Err(T2pStatus::NullPointer);
    }
    if len < need {
        return Err(T2pStatus::BufferTooSmall);
    }
    if !(p as usize).is_multiple_of(align_of::<f32>()) {
        return Err(T2pStatus::Misaligned);
    }
    Ok(())
}

pub(super) fn shape(rows: usize, k: usize) -> Result<usize, T2pStatus> {
    Ok(t2p_block_count(rows, k)?)
}

pub(super) fn write_out(out: *mut usize, value: usize) -> Result<(), T2pStatus> {
    if out.is_null() {
        return Err(T2pStatus::NullPointer);
    }
    // SAFETY: non-null; the caller provides a writable size_t.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// The library version as a static NUL-terminated string, e.g. `"0.1.0"`. Cannot fail.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library version as `major * 10000 + minor * 100 + patch`. Cannot fail.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_version_number() -> u32 {
    let part = |s: &str| s.parse::<u32>().unwrap_or(0);
    part(env!("CARGO_PKG_VERSION_MAJOR")) * 10000
        + part(env!("CARGO_PKG_VERSION_MINOR")) * 100
        + part(env!("CARGO_PKG_VERSION_PATCH"))
}

/// The CPU features t2p detected, as `T2P_CPU_*` bits. Cannot fail.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_cpu_features() -> u32 {
    cpu::features()
}

/// A static NUL-terminated description of a status code (any value is accepted). Cannot fail.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_status_string(status: u32) -> *const c_char {
    T2pStatus::message(status).as_ptr().cast()
}

/// The name of an ISA path (`"scalar"`, `"avx2"`, `"avx-vnni"`, `"neon"`, `"neon-dotprod"`,
/// `"neon-i8mm"`), or NULL for an unknown number. Cannot fail otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_isa_name(isa: u32) -> *const c_char {
    match isa {
        T2P_ISA_SCALAR => c"scalar".as_ptr(),
        T2P_ISA_AVX2 => c"avx2".as_ptr(),
        T2P_ISA_AVX_VNNI => c"avx-vnni".as_ptr(),
        T2P_ISA_NEON => c"neon".as_ptr(),
        T2P_ISA_NEON_DOTPROD => c"neon-dotprod".as_ptr(),
        T2P_ISA_NEON_I8MM => c"neon-i8mm".as_ptr(),
        _ => std::ptr::null(),
    }
}

/// Whether this CPU can run ISA path `isa` (`T2P_ISA_*`). Unknown numbers give false.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_isa_supported(isa: u32) -> bool {
    Isa::from_u32(isa).is_ok_and(Isa::is_supported)
}

/// The ISA path the kernels use now (`T2P_ISA_*`): the best one the CPU supports, unless
/// `T2P_ISA` in the environment or [`t2p_set_isa`] chose another. Cannot fail.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_active_isa() -> u32 {
    guard_value(|| kernels::active().isa() as u32, T2P_ISA_SCALAR)
}

/// Forces the ISA path for all later calls (process-wide), e.g. to test a lower path.
/// Returns `T2P_STATUS_INVALID_ARGUMENT` for an unknown number and `T2P_STATUS_UNSUPPORTED_ISA`
/// if this CPU cannot run it (the active path is then unchanged).
#[unsafe(no_mangle)]
pub extern "C" fn t2p_set_isa(isa: u32) -> T2pStatus {
    guard(|| Ok(kernels::set_active(Isa::from_u32(isa)?)?))
}

fn guard_value<T>(f: impl FnOnce() -> T, on_panic: T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Bytes of a `rows x k` matrix in pq2_0 and equally in T2P (`rows` a multiple of 4, `k` a
/// multiple of 256), written to `*out_bytes`.
///
/// # Safety
/// `out_bytes` must be NULL (an error) or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_repack_size(
    rows: usize,
    k: usize,
    out_bytes: *mut usize,
) -> T2pStatus {
    guard(|| write_out(out_bytes, shape(rows, k)? * T2P_T2P_BLOCK_BYTES))
}

/// Repacks a `rows x k` pq2_0 matrix (`src`, `src_bytes`) into the T2P layout (`dst`,
/// `dst_bytes`). `src == dst` repacks in place (extra memory: one row group); any other
/// overlap is `T2P_STATUS_INVALID_ARGUMENT`. Both buffers need 2-byte alignment.
///
/// # Safety
/// `src` must be readable for `src_bytes` bytes and `dst` writable for `dst_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_repack_pq2_0(
    src: *const c_void,
    src_bytes: usize,
    dst: *mut c_void,
    dst_bytes: usize,
    rows: usize,
    k: usize,
) -> T2pStatus {
    guard(|| {
        let n = shape(rows, k)?;
        let need = n * T2P_T2P_BLOCK_BYTES;
        if src.is_null() || dst.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if src_bytes < need || dst_bytes < need {
            return Err(T2pStatus::BufferTooSmall);
        }
        if std::ptr::eq(src, dst) {
            // SAFETY: src == dst is writable for dst_bytes by the caller's contract.
            let buf = unsafe { bytes_mut(dst, need) }?;
            if !(buf.as_ptr() as usize).is_multiple_of(2) {
                return Err(T2pStatus::Misaligned);
            }
            return Ok(repack_pq2_0_in_place(buf, rows, k)?);
        }
        let (s, d) = (src as usize, dst as usize);
        if s < d + need && d < s + need {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: readable for src_bytes >= need; the ranges do not overlap (checked above).
        let src = blocks::<BlockPq2_0>(unsafe { bytes(src, need) }?, 4 * n)?;
        // SAFETY: writable for dst_bytes >= need, disjoint from src.
        let dst = blocks_mut::<BlockT2p>(unsafe { bytes_mut(dst, need) }?, n)?;
        Ok(repack_pq2_0_to_t2p(src, rows, k, dst)?)
    })
}

/// The inverse of [`t2p_repack_pq2_0`] (out of place only): T2P (`src`) back to row-major
/// pq2_0 blocks (`dst`). Overlapping buffers are `T2P_STATUS_INVALID_ARGUMENT`.
///
/// # Safety
/// `src` must be readable for `src_bytes` bytes and `dst` writable for `dst_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_unpack_to_pq2_0(
    src: *const c_void,
    src_bytes: usize,
    dst: *mut c_void,
    dst_bytes: usize,
    rows: usize,
    k: usize,
) -> T2pStatus {
    guard(|| {
        let n = shape(rows, k)?;
        let need = n * T2P_T2P_BLOCK_BYTES;
        if src.is_null() || dst.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if src_bytes < need || dst_bytes < need {
            return Err(T2pStatus::BufferTooSmall);
        }
        let (s, d) = (src as usize, dst as usize);
        if s < d + need && d < s + need {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: readable for src_bytes >= need, disjoint from dst (checked above).
        let src = blocks::<BlockT2p>(unsafe { bytes(src, need) }?, n)?;
        // SAFETY: writable for dst_bytes >= need.
        let dst = blocks_mut::<BlockPq2_0>(unsafe { bytes_mut(dst, need) }?, 4 * n)?;
        Ok(unpack_t2p_to_pq2_0(src, rows, k, dst)?)
    })
}

/// Bytes of a `rows x k` matrix in source format `src_type` (`T2P_TYPE_*`), written to
/// `*out_bytes`. `T2P_STATUS_INVALID_ARGUMENT` for an unknown type.
///
/// # Safety
/// `out_bytes` must be NULL (an error) or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_source_size(
    src_type: u32,
    rows: usize,
    k: usize,
    out_bytes: *mut usize,
) -> T2pStatus {
    guard(|| write_out(out_bytes, source_bytes(src_type, rows, k)?))
}

/// Bytes of a `rows x k` matrix in source format `src_type`; `InvalidArgument` for an unknown
/// type, `InvalidShape` for a shape T2P cannot hold.
pub(super) fn source_bytes(src_type: u32, rows: usize, k: usize) -> Result<usize, T2pStatus> {
    shape(rows, k)?;
    let (weights, bytes) = match src_type {
        T2P_TYPE_PQ2_0 | T2P_TYPE_Q2_0_G128 => (BlockPq2_0::WEIGHTS, size_of::<BlockPq2_0>()),
        T2P_TYPE_TQ1_0 => (BlockTq1_0::WEIGHTS, size_of::<BlockTq1_0>()),
        T2P_TYPE_TQ2_0 => (BlockTq2_0::WEIGHTS, size_of::<BlockTq2_0>()),
        T2P_TYPE_PTQ1_0 => (BlockPtq1_0::WEIGHTS, size_of::<BlockPtq1_0>()),
        _ => return Err(T2pStatus::InvalidArgument),
    };
    Ok(rows * (k / weights) * bytes)
}

fn repack_typed<B: TernaryBlock>(
    src: &[u8],
    dst: &mut [u8],
    rows: usize,
    k: usize,
) -> Result<(), T2pStatus> {
    let n = shape(rows, k)?;
    let src = blocks::<B>(src, rows * (k / B::WEIGHTS))?;
    let dst = blocks_mut::<BlockT2p>(dst, n)?;
    Ok(repack_to_t2p(src, rows, k, dst)?)
}

/// Repacks a `rows x k` matrix of any ternary source format (`T2P_TYPE_*`: pq2_0, legacy
/// Q2_0 g128, tq1_0, tq2_0, ptq1_0) into T2P (`dst`, [`t2p_repack_size`] bytes), exactly: the
/// dequantized weights of source and result are bit-identical. The buffers must not overlap
/// (use [`t2p_repack_pq2_0`] for in place). Source sizes come from [`t2p_source_size`].
///
/// # Safety
/// `src` readable for `src_bytes` bytes, `dst` writable for `dst_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_repack_to_t2p(
    src_type: u32,
    src: *const c_void,
    src_bytes: usize,
    dst: *mut c_void,
    dst_bytes: usize,
    rows: usize,
    k: usize,
) -> T2pStatus {
    guard(|| {
        let n = shape(rows, k)?;
        if src.is_null() || dst.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        let (s, d) = (src as usize, dst as usize);
        if s < d.saturating_add(dst_bytes) && d < s.saturating_add(src_bytes) {
            return Err(T2pStatus::InvalidArgument);
        }
        if dst_bytes < n * T2P_T2P_BLOCK_BYTES {
            return Err(T2pStatus::BufferTooSmall);
        }
        // SAFETY: readable for src_bytes by the caller's contract; disjoint from dst (checked).
        let src = unsafe { bytes(src, src_bytes) }?;
        // SAFETY: writable for dst_bytes by the caller's contract.
        let dst = unsafe { bytes_mut(dst, dst_bytes) }?;
        match src_type {
            T2P_TYPE_PQ2_0 | T2P_TYPE_Q2_0_G128 => repack_typed::<BlockPq2_0>(src, dst, rows, k),
            T2P_TYPE_TQ1_0 => repack_typed::<BlockTq1_0>(src, dst, rows, k),
            T2P_TYPE_TQ2_0 => repack_typed::<BlockTq2_0>(src, dst, rows, k),
            T2P_TYPE_PTQ1_0 => repack_typed::<BlockPtq1_0>(src, dst, rows, k),
            _ => Err(T2pStatus::InvalidArgument),
        }
    })
}

fn check_k(k: usize) -> Result<usize, T2pStatus> {
    if k == 0 || !k.is_multiple_of(QK_K) {
        return Err(T2pStatus::InvalidShape);
    }
    Ok(k / QK_K)
}

/// Bytes needed for `ncols` activation columns of length `k` as q8_K (`ncols * k / 256` blocks,
/// the gemv operand) and as q8_K x4 (`ceil(ncols / 4) * k / 256` blocks, the gemm operand).
/// Either output pointer may be NULL if that size is not wanted.
///
/// # Safety
/// Non-NULL output pointers must point to writable `size_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_activation_size(
    k: usize,
    ncols: usize,
    out_q8_k_bytes: *mut usize,
    out_q8_k_x4_bytes: *mut usize,
) -> T2pStatus {
    guard(|| {
        let per = check_k(k)?;
        let q8 = ncols
            .checked_mul(per * T2P_Q8_K_BLOCK_BYTES)
            .ok_or(T2pStatus::InvalidShape)?;
        let x4 = ncols.div_ceil(4) * per * T2P_Q8_K_X4_BLOCK_BYTES;
        if !out_q8_k_bytes.is_null() {
            write_out(out_q8_k_bytes, q8)?;
        }
        if !out_q8_k_x4_bytes.is_null() {
            write_out(out_q8_k_x4_bytes, x4)?;
        }
        Ok(())
    })
}

/// Quantizes `k` floats (`x`, `k` a multiple of 256) to `k / 256` q8_K blocks in `y`
/// (`y_bytes` long, 4-byte aligned), exactly as ggml's `quantize_row_q8_K_ref`.
///
/// # Safety
/// `x` must be readable for `k` floats and `y` writable for `y_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_quantize_q8_K(
    x: *const f32,
    k: usize,
    y: *mut c_void,
    y_bytes: usize,
) -> T2pStatus {
    guard(|| {
        let per = check_k(k)?;
        floats_len(x, k, k)?;
        // SAFETY: writable for y_bytes by the caller's contract.
        let y = blocks_mut::<BlockQ8K>(unsafe { bytes_mut(y, y_bytes) }?, per)?;
        // SAFETY: x is non-null, aligned and readable for k floats (checked / by contract).
        let x = unsafe { std::slice::from_raw_parts(x, k) };
        quantize_row_q8k(x, y);
        Ok(())
    })
}

/// Quantizes `ncols` columns (column `c` at `x + c * ld_x`, `k` floats each) into
/// `ceil(ncols / 4)` tiles of `k / 256` q8_K x4 blocks in `y` (4-byte aligned); the columns
/// missing from the last tile are zero. `ld_x >= k` unless `ncols == 1`.
///
/// # Safety
/// `x` must be readable for `(ncols - 1) * ld_x + k` floats and `y` writable for `y_bytes`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_quantize_q8_K_x4(
    x: *const f32,
    ld_x: usize,
    k: usize,
    ncols: usize,
    y: *mut c_void,
    y_bytes: usize,
) -> T2pStatus {
    guard(|| {
        let per = check_k(k)?;
        if ncols == 0 || (ncols > 1 && ld_x < k) {
            return Err(T2pStatus::InvalidShape);
        }
        let n_x = (ncols - 1)
            .checked_mul(ld_x)
            .and_then(|v| v.checked_add(k))
            .ok_or(T2pStatus::InvalidShape)?;
        floats_len(x, n_x, n_x)?;
        // SAFETY: writable for y_bytes by the caller's contract.
        let y =
            blocks_mut::<BlockQ8Kx4>(unsafe { bytes_mut(y, y_bytes) }?, ncols.div_ceil(4) * per)?;
        // SAFETY: x is non-null, aligned and readable for n_x floats.
        let x = unsafe { std::slice::from_raw_parts(x, n_x) };
        for (t, tile) in y.chunks_exact_mut(per).enumerate() {
            let cols: Vec<&[f32]> = (4 * t..(4 * t + 4).min(ncols))
                .map(|c| &x[c * ld_x..c * ld_x + k])
                .collect();
            quantize_q8k_x4(&cols, k, tile);
        }
        Ok(())
    })
}

pub(super) fn row_range(
    rows: usize,
    k: usize,
    row_begin: usize,
    row_end: usize,
) -> Result<(), T2pStatus> {
    check_matrix_shape(rows, k)?;
    if row_begin > row_end
        || row_end > rows
        || !row_begin.is_multiple_of(4)
        || !row_end.is_multiple_of(4)
    {
        return Err(T2pStatus::InvalidShape);
    }
    Ok(())
}

/// Decode: `out[r] = sum_k w[r][k] * y[k]` for rows `row_begin..row_end` (multiples of 4) of a
/// `rows x k` T2P matrix `w`, with `y` one q8_K column (`k / 256` blocks, `bsums` consistent
/// with `qs` as [`t2p_quantize_q8_K`] writes them). Only
/// `out[row_begin..row_end]` is written; `out_len` is the length of `out` (at least `row_end`).
/// Threads may call this concurrently on disjoint row ranges of the same `out`.
///
/// # Safety
/// `w`/`y` readable for `w_bytes`/`y_bytes` bytes; `out` writable for `out_len` floats (only
/// the range is touched).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemv(
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
    // SAFETY: the caller's contract is the one gemv_with needs.
    guard(|| unsafe { gemv_with(kernels::active(), args) })
}

/// [`t2p_gemv`] on the scalar oracle, whatever path is active (for exactness checks such as
/// the llama.cpp patch's `T2P_VERIFY`).
///
/// # Safety
/// As for [`t2p_gemv`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemv_reference(
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
    // SAFETY: the caller's contract is the one gemv_with needs.
    guard(|| unsafe { gemv_with(Kernels::for_isa(Isa::Scalar)?, args) })
}

/// The arguments of [`t2p_gemv`] and its variants (the `q8_0` ones too), as passed from C.
pub(super) struct GemvArgs {
    pub(super) w: *const c_void,
    pub(super) w_bytes: usize,
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) y: *const c_void,
    pub(super) y_bytes: usize,
    pub(super) out: *mut f32,
    pub(super) out_len: usize,
    pub(super) row_begin: usize,
    pub(super) row_end: usize,
}

/// # Safety
/// The contract of [`t2p_gemv`].
unsafe fn gemv_with(kern: &Kernels, a: GemvArgs) -> Result<(), T2pStatus> {
    row_range(a.rows, a.k, a.row_begin, a.row_end)?;
    // SAFETY: readable for w_bytes / y_bytes by the caller's contract.
    let w = blocks::<BlockT2p>(
        unsafe { bytes(a.w, a.w_bytes) }?,
        t2p_block_count(a.rows, a.k)?,
    )?;
    // SAFETY: as above.
    let y = blocks::<BlockQ8K>(unsafe { bytes(a.y, a.y_bytes) }?, a.k / QK_K)?;
    floats_len(a.out, a.out_len, a.row_end)?;
    // SAFETY: row_end <= out_len; only this call's rows are borrowed, so concurrent calls on
    // disjoint row ranges never alias.
    let out =
        unsafe { std::slice::from_raw_parts_mut(a.out.add(a.row_begin), a.row_end - a.row_begin) };
    Ok(gemv_range(
        kern,
        w,
        a.rows,
        a.k,
        y,
        a.row_begin..a.row_end,
        out,
    )?)
}

/// Prefill: `out[c * ld_out + r] = sum_k w[r][k] * x_c[k]` for rows `row_begin..row_end`
/// (multiples of 4) and `ncols` columns given as `ceil(ncols / 4)` q8_K x4 tiles in `y` (from
/// [`t2p_quantize_q8_K_x4`]). Whole tiles run through gemm, a leftover of 2-3 columns through
/// one zero-padded tile, a single leftover column through gemv. `ld_out >= rows`;
/// `out_len >= (ncols - 1) * ld_out + row_end`. Only the range's outputs are written, so
/// threads may call this concurrently on disjoint row ranges of the same `out`.
///
/// # Safety
/// `w`/`y` readable for `w_bytes`/`y_bytes` bytes; `out` writable for `out_len` floats.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemm(
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
    // SAFETY: the caller's contract is the one gemm_with needs.
    guard(|| unsafe { gemm_with(kernels::active(), args) })
}

/// [`t2p_gemm`] on the scalar oracle, whatever path is active.
///
/// # Safety
/// As for [`t2p_gemm`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_gemm_reference(
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
    // SAFETY: the caller's contract is the one gemm_with needs.
    guard(|| unsafe { gemm_with(Kernels::for_isa(Isa::Scalar)?, args) })
}

/// The arguments of [`t2p_gemm`] and its variants (the `q8_0` ones too), as passed from C.
pub(super) struct GemmArgs {
    pub(super) w: *const c_void,
    pub(super) w_bytes: usize,
    pub(super) rows: usize,
    pub(super) k: usize,
    pub(super) y: *const c_void,
    pub(super) y_bytes: usize,
    pub(super) ncols: usize,
    pub(super) out: *mut f32,
    pub(super) ld_out: usize,
    pub(super) out_len: usize,
    pub(super) row_begin: usize,
    pub(super) row_end: usize,
}

thread_local! {
    static GEMM_SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// # Safety
/// The contract of [`t2p_gemm`].
unsafe fn gemm_with(kern: &Kernels, a: GemmArgs) -> Result<(), T2pStatus> {
    row_range(a.rows, a.k, a.row_begin, a.row_end)?;
    if a.ncols == 0 || a.ld_out < a.rows {
        return Err(T2pStatus::InvalidShape);
    }
    // SAFETY: readable for w_bytes / y_bytes by the caller's contract.
    let w = blocks::<BlockT2p>(
        unsafe { bytes(a.w, a.w_bytes) }?,
        t2p_block_count(a.rows, a.k)?,
    )?;
    let tiles = a.ncols.div_ceil(4) * (a.k / QK_K);
    // SAFETY: as above.
    let y = blocks::<BlockQ8Kx4>(unsafe { bytes(a.y, a.y_bytes) }?, tiles)?;
    let need = (a.ncols - 1)
        .checked_mul(a.ld_out)
        .and_then(|v| v.checked_add(a.row_end))
        .ok_or(T2pStatus::InvalidShape)?;
    floats_len(a.out, a.out_len, need)?;
    let n = a.row_end - a.row_begin;
    GEMM_SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        scratch.resize(a.ncols * n, 0.0);
        gemm_range(
            kern,
            w,
            a.rows,
            a.k,
            y,
            a.ncols,
            a.row_begin..a.row_end,
            scratch,
            n.max(1),
        )?;
        for c in 0..a.ncols {
            // SAFETY: c * ld_out + row_end <= need <= out_len; this column piece of the row range
            // belongs to this call only, so concurrent calls on disjoint ranges never alias.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(a.out.add(c * a.ld_out + a.row_begin), n) };
            dst.copy_from_slice(&scratch[c * n..(c + 1) * n]);
        }
        Ok(())
    })
}

/// ggml-compatible dot product of one pq2_0 row with one q8_K column of `n` values (`n` a
/// multiple of 256): `*s = dot`, on the stock file layout. It has ggml's `vec_dot` signature and
/// therefore returns nothing: on invalid arguments (NULL pointers, `n` not a positive multiple
/// of 256, `nrc != 1`, misaligned blocks) it writes NaN to `*s` when `s` is not NULL, so errors
/// cannot pass silently. `bs`, `bx` and `by` are ignored, as ggml does for `nrc == 1`.
///
/// # Safety
/// `vx` readable for `n / 128` pq2_0 blocks, `vy` for `n / 256` q8_K blocks, `s` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_vec_dot_pq2_0_q8_K(
    n: c_int,
    s: *mut f32,
    bs: usize,
    vx: *const c_void,
    bx: usize,
    vy: *const c_void,
    by: usize,
    nrc: c_int,
) {
    let _ = (bs, bx, by);
    let value = guard_value(
        || {
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n > 0 && n.is_multiple_of(QK_K))?;
            if nrc != 1 {
                return None;
            }
            // SAFETY: readable for n / 128 pq2_0 blocks by the caller's contract.
            let x = blocks::<BlockPq2_0>(
                unsafe { bytes(vx, n / QK_PQ2_0 * T2P_PQ2_0_BLOCK_BYTES) }.ok()?,
                n / QK_PQ2_0,
            )
            .ok()?;
            // SAFETY: readable for n / 256 q8_K blocks by the caller's contract.
            let y = blocks::<BlockQ8K>(
                unsafe { bytes(vy, n / QK_K * T2P_Q8_K_BLOCK_BYTES) }.ok()?,
                n / QK_K,
            )
            .ok()?;
            Some(kernels::active().vec_dot_stock(x, y))
        },
        None,
    );
    if !s.is_null() {
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { s.write_unaligned(value.unwrap_or(f32::NAN)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_isa_has_its_name_in_c() {
        for isa in Isa::ALL {
            let p = t2p_isa_name(isa as u32);
            assert!(!p.is_null(), "{isa} has no C name");
            // SAFETY: non-null names are static NUL-terminated strings.
            let name = unsafe { std::ffi::CStr::from_ptr(p) };
            assert_eq!(name.to_str(), Ok(isa.name()));
        }
        assert!(t2p_isa_name(99).is_null());
    }
}
