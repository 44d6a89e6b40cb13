//! The exported functions. Each body validates its arguments, then calls the safe library.

use std::ffi::{c_char, c_int, c_void};

use bytemuck::Pod;

use super::status::{T2pStatus, guard};
use crate::format::i2s::repack_bitnet_to_t2p;
use crate::format::{
    BlockPq2_0, BlockQ8K, BlockQ8Kx4, BlockT2p, BlockT2pG64, GgmlType, QK_K, QK_PQ2_0,
    TernaryBlock, repack_pq2_0_in_place, repack_to_t2p, t2p_block_count, with_block_type,
};
use crate::kernels::{self, Isa, cpu};

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
/// x86_64 AVX2 + F16C + AVX-512 F/BW/VL/VNNI path.
pub const T2P_ISA_AVX512_VNNI: u32 = 6;
/// x86_64 AVX-512 VNNI + AMX-TILE/INT8 path (tile gemms for 16+ columns).
pub const T2P_ISA_AMX: u32 = 7;

/// CPU feature bit: x86_64 AVX2.
pub const T2P_CPU_AVX2: u32 = 1 << 0;
/// CPU feature bit: x86_64 FMA.
pub const T2P_CPU_FMA: u32 = 1 << 1;
/// CPU feature bit: x86_64 F16C.
pub const T2P_CPU_F16C: u32 = 1 << 2;
/// CPU feature bit: x86_64 AVX-512F.
pub const T2P_CPU_AVX512F: u32 = 1 << 3;
/// CPU feature bit: x86_64 AVX-512 VNNI with BW and VL (what the `avx512-vnni` path needs).
pub const T2P_CPU_AVX512_VNNI: u32 = 1 << 4;
/// CPU feature bit: x86_64 AVX-VNNI (the VEX-encoded `vpdpbusd`).
pub const T2P_CPU_AVX_VNNI: u32 = 1 << 5;
/// CPU feature bit: x86_64 GFNI (the `avx512-vnni` gemv decodes with it where present).
pub const T2P_CPU_GFNI: u32 = 1 << 6;
/// CPU feature bit: x86_64 AMX-TILE and AMX-INT8, with the tile state granted by Linux.
pub const T2P_CPU_AMX: u32 = 1 << 7;
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
/// Source format: PrismML ptq1_0 (GGML type 143, 128 weights in 28 bytes; the element order of
/// PrismML's own x86 kernel).
pub const T2P_TYPE_PTQ1_0: u32 = 143;
/// Source format: mainline llama.cpp's Q2_0 (GGML type 42 with 18-byte blocks of 64 weights:
/// pq2_0's codes with a scale per 64). Its own number, because 42 here means the legacy
/// group-128 bytes ([`T2P_TYPE_Q2_0_G128`]). It repacks into the group-64 T2P layout
/// ([`T2P_T2P_G64_BLOCK_BYTES`] per block), which plans made by
/// [`t2p_plan_init_for`](crate::ffi::t2p_plan_init_for) read.
pub const T2P_TYPE_Q2_0: u32 = 1042;
/// Source format: bitnet.cpp's I2_S (GGML type 36 in its files; BitNet b1.58 2B-4T, Falcon3
/// 1.58-bit): 2-bit codes in blocks of 128 weights in 32 bytes, then one f32 scale for the
/// whole tensor and 28 bytes of padding. Its T2P form carries f32 row scales after the blocks
/// and is multiplied with per-token int8 activations ([`T2P_ACT_I8`](crate::ffi::T2P_ACT_I8)).
pub const T2P_TYPE_I2_S: u32 = 36;
/// Source format: ik_llama.cpp's IQ2_BN (type 135): per row an f32 scale, then blocks of 64
/// weights in 16 bytes. As [`T2P_TYPE_I2_S`], with a scale per row.
pub const T2P_TYPE_IQ2_BN: u32 = 135;
/// Source format: ik_llama.cpp's IQ1_BN (type 134): per row an fp16 scale, then blocks of 64
/// weights in 13 bytes of base-3 digits. As [`T2P_TYPE_IQ2_BN`].
pub const T2P_TYPE_IQ1_BN: u32 = 134;

/// Bytes of one pq2_0 block (128 weights).
pub const T2P_PQ2_0_BLOCK_BYTES: usize = 34;
/// Bytes of one T2P block (4 rows x 128 weights).
pub const T2P_T2P_BLOCK_BYTES: usize = 136;
/// Bytes of one group-64 T2P block (4 rows x 128 weights, a scale per 64: from Q2_0).
pub const T2P_T2P_G64_BLOCK_BYTES: usize = 144;
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
    assert!(T2P_ISA_AVX512_VNNI == Isa::Avx512Vnni as u32);
    assert!(T2P_CPU_AVX512_VNNI == cpu::AVX512_VNNI && T2P_CPU_AVX_VNNI == cpu::AVX_VNNI);
    assert!(T2P_CPU_DOTPROD == cpu::DOTPROD && T2P_CPU_I8MM == cpu::I8MM);
    assert!(T2P_CPU_GFNI == cpu::GFNI);
    assert!(T2P_ISA_AMX == Isa::Amx as u32 && T2P_CPU_AMX == cpu::AMX);
    assert!(
        T2P_PQ2_0_BLOCK_BYTES == size_of::<BlockPq2_0>()
            && T2P_T2P_BLOCK_BYTES == size_of::<BlockT2p>()
            && T2P_T2P_G64_BLOCK_BYTES == size_of::<BlockT2pG64>()
    );
    assert!(
        T2P_Q8_K_BLOCK_BYTES == size_of::<BlockQ8K>()
            && T2P_Q8_K_X4_BLOCK_BYTES == size_of::<BlockQ8Kx4>()
    );
    // The source types are the ids of the GGML type table.
    assert!(T2P_TYPE_PQ2_0 == GgmlType::PQ2_0.0 && T2P_TYPE_PTQ1_0 == GgmlType::PTQ1_0.0);
    assert!(T2P_TYPE_TQ1_0 == GgmlType::TQ1_0.0 && T2P_TYPE_TQ2_0 == GgmlType::TQ2_0.0);
    assert!(T2P_TYPE_Q2_0_G128 == GgmlType::Q2_0_LEGACY.0);
    assert!(T2P_TYPE_Q2_0 == GgmlType::Q2_0_G64.0);
    assert!(T2P_TYPE_I2_S == GgmlType::I2_S.0 && T2P_TYPE_IQ2_BN == GgmlType::IQ2_BN.0);
    assert!(T2P_TYPE_IQ1_BN == GgmlType::IQ1_BN.0);
};

/// The ternary format of a `T2P_TYPE_*` value (the legacy Q2_0 g128 id holds pq2_0 bytes), or
/// `InvalidArgument`.
pub(super) fn source_type(src_type: u32) -> Result<GgmlType, T2pStatus> {
    match GgmlType(src_type) {
        GgmlType::Q2_0_LEGACY => Ok(GgmlType::PQ2_0),
        ty if ty.has_t2p_layout() || ty.is_int8_ternary() => Ok(ty),
        _ => Err(T2pStatus::InvalidArgument),
    }
}

/// Bytes of the T2P form of a `rows x k` matrix of source format `src_type`: group-64 blocks
/// for Q2_0, group-128 blocks for every other format, followed for BitNet's formats by their
/// `rows` f32 row scales.
pub(super) fn t2p_bytes(src_type: u32, rows: usize, k: usize) -> Result<usize, T2pStatus> {
    let ty = source_type(src_type)?;
    let block = if ty == GgmlType::Q2_0_G64 {
        T2P_T2P_G64_BLOCK_BYTES
    } else {
        T2P_T2P_BLOCK_BYTES
    };
    let blocks = t2p_blocks_of(rows, k)? * block;
    if ty.is_int8_ternary() {
        return blocks
            .checked_add(int8_scales_bytes(rows)?)
            .ok_or(T2pStatus::InvalidShape);
    }
    Ok(blocks)
}

/// Bytes of the f32 row scales after a BitNet matrix's T2P blocks.
pub(super) fn int8_scales_bytes(rows: usize) -> Result<usize, T2pStatus> {
    rows.checked_mul(size_of::<f32>())
        .ok_or(T2pStatus::InvalidShape)
}

/// Whether the byte ranges `[a, a + a_len)` and `[b, b + b_len)` overlap.
pub(super) fn overlaps(a: *const c_void, a_len: usize, b: *const c_void, b_len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a < b.saturating_add(b_len) && b < a.saturating_add(a_len)
}

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

/// T2P blocks of a `rows x k` matrix (its shape checked), as a C status on error.
pub(super) fn t2p_blocks_of(rows: usize, k: usize) -> Result<usize, T2pStatus> {
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

/// The library version as a static NUL-terminated string, e.g. `"0.2.0"`. Cannot fail.
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

/// The name of an ISA path (`"scalar"`, `"avx2"`, `"avx-vnni"`, `"avx512-vnni"`, `"amx"`, `"neon"`, `"neon-dotprod"`,
/// `"neon-i8mm"`), or NULL for an unknown number. Cannot fail otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn t2p_isa_name(isa: u32) -> *const c_char {
    match isa {
        T2P_ISA_SCALAR => c"scalar".as_ptr(),
        T2P_ISA_AVX2 => c"avx2".as_ptr(),
        T2P_ISA_AVX_VNNI => c"avx-vnni".as_ptr(),
        T2P_ISA_AVX512_VNNI => c"avx512-vnni".as_ptr(),
        T2P_ISA_AMX => c"amx".as_ptr(),
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

/// Bytes of a `rows x k` matrix in T2P (`rows` positive, `k` a positive multiple of 128):
/// `ceil(rows / 4) * k / 128` blocks of 136 bytes, equal to the pq2_0 size when `rows` is a
/// multiple of 4, written to `*out_bytes`.
///
/// # Safety
/// `out_bytes` must be NULL (an error) or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_repack_size(
    rows: usize,
    k: usize,
    out_bytes: *mut usize,
) -> T2pStatus {
    guard(|| write_out(out_bytes, t2p_blocks_of(rows, k)? * T2P_T2P_BLOCK_BYTES))
}

/// Bytes of the T2P form of a `rows x k` matrix repacked from source format `src_type`
/// (`T2P_TYPE_*`), written to `*out_bytes`: [`t2p_repack_size`] for every format but Q2_0
/// (`T2P_TYPE_Q2_0`), whose blocks keep a scale per 64 weights ([`T2P_T2P_G64_BLOCK_BYTES`],
/// the size of the source when `rows` is a multiple of 4), and BitNet's (`T2P_TYPE_I2_S`,
/// `T2P_TYPE_IQ2_BN`, `T2P_TYPE_IQ1_BN`), whose blocks are followed by `rows` f32 row scales. `T2P_STATUS_INVALID_ARGUMENT` for an
/// unknown type.
///
/// # Safety
/// `out_bytes` must be NULL (an error) or point to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_repacked_size(
    src_type: u32,
    rows: usize,
    k: usize,
    out_bytes: *mut usize,
) -> T2pStatus {
    guard(|| write_out(out_bytes, t2p_bytes(src_type, rows, k)?))
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
    t2p_blocks_of(rows, k)?;
    let ty = source_type(src_type)?;
    if ty.is_int8_ternary() {
        // Sized by the tensor, not by blocks (I2_S's trailer, the row scales).
        return ty
            .tensor_bytes(&[k as u64, rows as u64])
            .and_then(|b| usize::try_from(b).ok())
            .ok_or(T2pStatus::InvalidShape);
    }
    let (weights, bytes) = ty.block().ok_or(T2pStatus::InvalidArgument)?;
    let (weights, bytes) = (weights as usize, bytes as usize);
    if !k.is_multiple_of(weights) {
        return Err(T2pStatus::InvalidShape);
    }
    Ok(rows * (k / weights) * bytes)
}

fn repack_typed<B: TernaryBlock>(
    src: &[u8],
    dst: &mut [u8],
    rows: usize,
    k: usize,
) -> Result<(), T2pStatus> {
    let n = t2p_blocks_of(rows, k)?;
    if !k.is_multiple_of(B::WEIGHTS) {
        return Err(T2pStatus::InvalidShape);
    }
    let src = blocks::<B>(src, rows * (k / B::WEIGHTS))?;
    let dst = blocks_mut::<B::Target>(dst, n)?;
    Ok(repack_to_t2p(src, rows, k, dst)?)
}

/// Repacks a `rows x k` matrix of any ternary source format (`T2P_TYPE_*`: pq2_0, legacy
/// Q2_0 g128, tq1_0, tq2_0, ptq1_0, Q2_0, I2_S, IQ2_BN, IQ1_BN; `src`, [`t2p_source_size`]
/// bytes) into T2P (`dst`, [`t2p_repacked_size`] bytes: group-64 blocks for Q2_0), exactly: the
/// dequantized weights of source and result are bit-identical. BitNet's formats (I2_S, IQ2_BN,
/// IQ1_BN) become blocks of scale 1.0 followed by `rows` f32 row scales (I2_S's one scale
/// repeated, IQ1_BN's fp16 widened); their `dst` is 4-byte aligned. `rows` is any positive number (a last group of fewer than 4 rows is padded
/// with zero rows), `k` a multiple of the format's block (128, or 256 for tq1_0 / tq2_0). For
/// pq2_0 and Q2_0 g128, `src == dst` repacks in place (extra memory: one row group; the buffer
/// must have the T2P size); any other overlap is `T2P_STATUS_INVALID_ARGUMENT`. Buffers are
/// 2-byte aligned.
///
/// # Safety
/// `src` readable for `src_bytes` bytes, `dst` writable for `dst_bytes` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_repack(
    src_type: u32,
    src: *const c_void,
    src_bytes: usize,
    dst: *mut c_void,
    dst_bytes: usize,
    rows: usize,
    k: usize,
) -> T2pStatus {
    guard(|| {
        let need = t2p_bytes(src_type, rows, k)?;
        if src.is_null() || dst.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if dst_bytes < need || src_bytes < source_bytes(src_type, rows, k)? {
            return Err(T2pStatus::BufferTooSmall);
        }
        let ty = source_type(src_type)?;
        if ty == GgmlType::PQ2_0 && std::ptr::eq(src, dst) {
            // SAFETY: src == dst is writable for dst_bytes by the caller's contract.
            let buf = unsafe { bytes_mut(dst, need) }?;
            if !(buf.as_ptr() as usize).is_multiple_of(2) {
                return Err(T2pStatus::Misaligned);
            }
            return Ok(repack_pq2_0_in_place(buf, rows, k)?);
        }
        if overlaps(src, src_bytes, dst, dst_bytes) {
            return Err(T2pStatus::InvalidArgument);
        }
        // SAFETY: readable for src_bytes by the caller's contract; disjoint from dst (checked).
        let src = unsafe { bytes(src, src_bytes) }?;
        // SAFETY: writable for dst_bytes by the caller's contract.
        let dst = unsafe { bytes_mut(dst, dst_bytes) }?;
        if ty.is_int8_ternary() {
            return repack_int8(ty, src, &mut dst[..need], rows, k);
        }
        with_block_type!(ternary ty, B => repack_typed::<B>(src, dst, rows, k), _ => Err(T2pStatus::InvalidArgument))
    })
}

/// A BitNet matrix (`ty` I2_S, IQ2_BN or IQ1_BN) into unit-scale T2P blocks and the f32 row
/// scales after them (`dst` exactly [`t2p_bytes`] long, 4-byte aligned).
fn repack_int8(
    ty: GgmlType,
    src: &[u8],
    dst: &mut [u8],
    rows: usize,
    k: usize,
) -> Result<(), T2pStatus> {
    if !(dst.as_ptr() as usize).is_multiple_of(4) {
        return Err(T2pStatus::Misaligned);
    }
    let src = &src[..source_bytes(ty.0, rows, k)?];
    let (blocks, scales) = dst.split_at_mut(dst.len() - int8_scales_bytes(rows)?);
    let blocks = blocks_mut::<BlockT2p>(blocks, t2p_blocks_of(rows, k)?)?;
    if !ty.is_int8_ternary() {
        return Err(T2pStatus::InvalidArgument);
    }
    let found = repack_bitnet_to_t2p(ty, src, rows, k, blocks)?;
    // I2_S has one scale for the tensor: every row gets it.
    let scales = blocks_mut::<f32>(scales, rows)?;
    match found[..] {
        [one] => scales.fill(one),
        _ => scales.copy_from_slice(&found),
    }
    Ok(())
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
