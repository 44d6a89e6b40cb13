//! The matmul entry points: one plan, the driver's four steps (work size, quantize a share,
//! the row chunks, compute a row range), so that C callers with their own threads (ggml) run
//! exactly the driver the Rust runner runs ([`crate::matmul::MatmulPlan`]).
//!
//! ```c
//! T2pPlan plan;
//! t2p_plan_init(&plan, T2P_ACT_Q8_0, rows, k, ncols);        /* plan.work_bytes: the work buffer */
//! /* every thread ith of nth: */
//! t2p_plan_quantize(&plan, x, ld_x, x_len, NULL, work, plan.work_bytes, ith, nth);
//! /* barrier, then for the chunks this thread takes: */
//! size_t n, b, e;
//! t2p_plan_chunk_count(&plan, nth, &n);
//! t2p_plan_chunk_rows(&plan, i, n, &b, &e);
//! t2p_plan_compute(&plan, T2P_ISA_ACTIVE, w, w_bytes, work, plan.work_bytes, out, ld_out, out_len, b, e);
//! ```

use std::ffi::c_void;

use super::abi::{blocks, bytes, floats_len, source_type, write_out};
use super::status::{T2pStatus, guard};
use crate::format::i2s::{int8_output_scale, quantize_row_i8_quads};
use crate::format::{
    BlockQ8_0Quad, BlockT2p, BlockT2pG64, GGML_Q8_0_BLOCK_BYTES, GgmlType, QK_PQ2_0, T2pSlice,
    t2p_block_count,
};
use crate::kernels::{self, Isa, Kernels};
use crate::matmul::{ActLayout, ActQuant, MatmulPlan, Q8_0Quantizer, with_scratch};

/// Activation type: q8_K, one scale per 256 values (ggml's type for tq1_0 / tq2_0).
pub const T2P_ACT_Q8_K: u32 = 0;
/// Activation type: q8_0, one scale per 32 values (llama.cpp's type for pq2_0).
pub const T2P_ACT_Q8_0: u32 = 1;
/// Activation type: int8 with one scale per column, `s = 127 / max(max|x|, 1e-5)`, rounded
/// half to even (bitnet.cpp's, what BitNet b1.58 was trained with). The type of every plan of
/// a BitNet matrix (`T2P_TYPE_I2_S`, `T2P_TYPE_IQ2_BN`, `T2P_TYPE_IQ1_BN`); outputs are
/// `(integer sum) * (row scale / s)`, in f32.
pub const T2P_ACT_I8: u32 = 2;
/// ISA argument of `t2p_plan_compute`: the active path (what `t2p_active_isa` returns).
pub const T2P_ISA_ACTIVE: u32 = u32::MAX;

/// One T2P matmul `out[c * ld_out + r] = sum_k w[r][k] * x_c[k]`: a `rows x k` T2P matrix times
/// `ncols` activation columns. Filled by [`t2p_plan_init`]; the other functions check it again,
/// so a plan changed by hand is an error, never undefined behaviour.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct T2pPlan {
    /// The activation type in use (`T2P_ACT_*`): q8_0 whenever `k` is not a multiple of 256.
    pub act: u32,
    /// Output rows (any positive number; a last group of fewer than 4 rows is padded).
    pub rows: usize,
    /// Inner dimension, a positive multiple of 128.
    pub k: usize,
    /// Activation columns.
    pub ncols: usize,
    /// Bytes of the work buffer (4-byte aligned) that holds the quantized activations.
    pub work_bytes: usize,
    /// Weights per weight scale of the T2P matrix: 128, or 64 for a matrix repacked from Q2_0
    /// (`T2P_TYPE_Q2_0`, group-64 T2P blocks; such a plan is always q8_0).
    pub scale_group: usize,
}

/// A C plan as the driver runs it.
struct Checked {
    m: MatmulPlan,
    scale_group: usize,
    /// A BitNet plan ([`T2P_ACT_I8`]): int8 quads of scale 1.0 then the columns' f32 scales
    /// in the work buffer, unit-scale blocks then the rows' f32 scales in the weights.
    int8: bool,
    /// Bytes of the plan's work buffer.
    work_bytes: usize,
}

/// Bytes of the work buffer of a [`T2P_ACT_I8`] plan: the quads, then one f32 per column.
fn int8_work_bytes(m: &MatmulPlan) -> usize {
    m.layout().work_bytes() + size_of::<f32>() * m.layout().ncols()
}

fn act_from(act: u32) -> Result<ActQuant, T2pStatus> {
    match act {
        T2P_ACT_Q8_K => Ok(ActQuant::Q8K),
        // Int8 vectors are q8_0 quads whose block scales are 1.0.
        T2P_ACT_Q8_0 | T2P_ACT_I8 => Ok(ActQuant::Q8_0),
        _ => Err(T2pStatus::InvalidArgument),
    }
}

/// The Rust plan behind a C plan, checked again.
///
/// # Safety
/// `plan` must be NULL or point to a readable `T2pPlan`.
unsafe fn plan_from(plan: *const T2pPlan) -> Result<Checked, T2pStatus> {
    if plan.is_null() {
        return Err(T2pStatus::NullPointer);
    }
    // SAFETY: non-null and readable by the caller's contract; read unaligned to be lenient.
    let p = unsafe { plan.read_unaligned() };
    let int8 = p.act == T2P_ACT_I8;
    let mut m = MatmulPlan::new(p.rows, p.k, p.ncols, act_from(p.act)?)?;
    let work_bytes = if int8 {
        m = m.with_unit_scales();
        int8_work_bytes(&m)
    } else {
        m.layout().work_bytes()
    };
    if m.layout().act() != act_from(p.act)? || work_bytes != p.work_bytes {
        return Err(T2pStatus::InvalidArgument);
    }
    match p.scale_group {
        QK_PQ2_0 => {}
        64 if m.layout().act() == ActQuant::Q8_0 && !int8 => {}
        _ => return Err(T2pStatus::InvalidArgument),
    }
    Ok(Checked {
        m,
        scale_group: p.scale_group,
        int8,
        work_bytes,
    })
}

/// Fills `*plan` for a `rows x k` T2P matrix (`rows` positive, `k` a positive multiple of 128)
/// with a scale per 128 weights (repacked from any source format but Q2_0) times `ncols`
/// columns quantized as `act` (`T2P_ACT_Q8_K` or `T2P_ACT_Q8_0`; a `k` that is not a multiple
/// of 256 always gets q8_0, which `plan->act` then says). `plan->work_bytes` is the size of the
/// work buffer the other calls need.
///
/// # Safety
/// `plan` must be NULL (an error) or point to a writable `T2pPlan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_plan_init(
    plan: *mut T2pPlan,
    act: u32,
    rows: usize,
    k: usize,
    ncols: usize,
) -> T2pStatus {
    // SAFETY: the caller's contract.
    unsafe { t2p_plan_init_for(plan, crate::ffi::T2P_TYPE_PQ2_0, act, rows, k, ncols) }
}

/// [`t2p_plan_init`] for a matrix repacked from source format `src_type` (`T2P_TYPE_*`): for
/// Q2_0 (`T2P_TYPE_Q2_0`) the plan reads group-64 T2P blocks (`plan->scale_group` = 64) and
/// always quantizes as q8_0 (ggml's activation type for Q2_0), whatever `act` asks; for BitNet's
/// formats (`T2P_TYPE_I2_S`, `T2P_TYPE_IQ2_BN`, `T2P_TYPE_IQ1_BN`) it always quantizes as
/// [`T2P_ACT_I8`] and reads their T2P form with the row scales after the blocks; every other
/// format gives [`t2p_plan_init`]'s plan.
///
/// # Safety
/// `plan` must be NULL (an error) or point to a writable `T2pPlan`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_plan_init_for(
    plan: *mut T2pPlan,
    src_type: u32,
    act: u32,
    rows: usize,
    k: usize,
    ncols: usize,
) -> T2pStatus {
    guard(|| {
        if plan.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        let ty = source_type(src_type)?;
        let g64 = ty == GgmlType::Q2_0_G64;
        let int8 = ty.is_int8_ternary();
        let act = if g64 || int8 {
            ActQuant::Q8_0
        } else {
            act_from(act)?
        };
        let m = MatmulPlan::new(rows, k, ncols, act)?;
        let value = T2pPlan {
            act: match m.layout().act() {
                _ if int8 => T2P_ACT_I8,
                ActQuant::Q8K => T2P_ACT_Q8_K,
                ActQuant::Q8_0 => T2P_ACT_Q8_0,
            },
            rows,
            k,
            ncols,
            work_bytes: if int8 {
                int8_work_bytes(&m)
            } else {
                m.layout().work_bytes()
            },
            scale_group: if g64 { 64 } else { QK_PQ2_0 },
        };
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { plan.write_unaligned(value) };
        Ok(())
    })
}

/// ggml's `from_float` signature (`ggml_from_float_t`): quantizes `k` floats (a multiple of 32)
/// into `k / 32` ggml `block_q8_0` (`{ uint16_t d (fp16); int8_t qs[32]; }`).
pub type T2pQ8_0FromFloat = Option<unsafe extern "C" fn(x: *const f32, y: *mut c_void, k: i64)>;

/// Quads quantized per call of a caller's `from_float`, through a stack buffer.
const QUADS_PER_CALL: usize = 16;

/// Quantizes share `ith` of `nth` of the activations into the work buffer: thread `ith` of a
/// team of `nth` writes only its own part of `work`, so all threads may call this at once on
/// the same buffer; all must finish before any [`t2p_plan_compute`]. Column `c` is the `k`
/// floats at `x + c * ld_x` (`ld_x >= k` unless `ncols == 1`; `x_len >= (ncols - 1) * ld_x + k`).
///
/// `from_float` may be NULL (t2p's q8_0 quantizer: the rounding of ggml's x86
/// `quantize_row_q8_0`) or ggml's own `quantize_row_q8_0`, used for q8_0 plans so that the
/// kernels see the very activations ggml's `vec_dot` would see on any platform (q8_K plans
/// always use t2p's quantizer, the rounding of ggml's `quantize_row_q8_K_ref`). For one q8_K
/// column the work buffer holds plain ggml `block_q8_K` (`k / 256` of them, `bsums` filled).
/// A [`T2P_ACT_I8`] plan quantizes whole columns (share `ith` takes columns
/// `ncols * ith / nth ..ncols * (ith + 1) / nth`; one column is one thread's work) and ignores
/// `from_float`.
///
/// # Safety
/// `plan` from [`t2p_plan_init`]; `x` readable for `x_len` floats; `work` writable for
/// `work_bytes` bytes (only this share's part is touched); `from_float`, if given, must write
/// exactly `k / 32` blocks.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn t2p_plan_quantize(
    plan: *const T2pPlan,
    x: *const f32,
    ld_x: usize,
    x_len: usize,
    from_float: T2pQ8_0FromFloat,
    work: *mut c_void,
    work_bytes: usize,
    ith: u32,
    nth: u32,
) -> T2pStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { plan_from(plan) }?;
        let l = *c.m.layout();
        if nth == 0 || ith >= nth {
            return Err(T2pStatus::InvalidArgument);
        }
        floats_len(x, x_len, 0)?;
        if work.is_null() {
            return Err(T2pStatus::NullPointer);
        }
        if work_bytes < c.work_bytes {
            return Err(T2pStatus::BufferTooSmall);
        }
        if !(work as usize).is_multiple_of(4) {
            return Err(T2pStatus::Misaligned);
        }
        // SAFETY: x is non-null, aligned and readable for x_len floats (checked / contract);
        // the layout checks that the columns fit in x_len.
        let xs = unsafe { std::slice::from_raw_parts(x, x_len) };
        if c.int8 {
            // SAFETY: work is 4-byte aligned and writable for the plan's work bytes (checked /
            // contract); `quantize_int8_share` writes only this share's columns.
            return unsafe { quantize_int8_share(&l, xs, ld_x, work, ith as usize, nth as usize) };
        }
        let share = l.share(ith as usize, nth as usize);
        // SAFETY: the share's words lie within work_bytes (checked), 4-byte aligned (checked),
        // and no other thread's share overlaps them, so this `&mut` aliases nothing.
        let out = unsafe {
            std::slice::from_raw_parts_mut(work.cast::<u32>().add(share.start), share.len())
        };
        let (ith, nth) = (ith as usize, nth as usize);
        let ggml = from_float
            .map(|f| move |v: &[f32], quads: &mut [BlockQ8_0Quad]| ggml_q8_0(f, v, quads));
        l.quantize_share(
            xs,
            ld_x,
            ith,
            nth,
            out,
            ggml.as_ref().map(|q| q as &Q8_0Quantizer),
        )?;
        Ok(())
    })
}

/// Quantizes columns `ncols * ith / nth .. ncols * (ith + 1) / nth` of `x` per token to int8
/// ([`quantize_row_i8_quads`]): their quads and their scales `s` after the quads.
///
/// # Safety
/// `work` 4-byte aligned and writable for the plan's work bytes; no other thread writes these
/// columns' quads or scales at the same time.
unsafe fn quantize_int8_share(
    l: &ActLayout,
    x: &[f32],
    ld_x: usize,
    work: *mut c_void,
    ith: usize,
    nth: usize,
) -> Result<(), T2pStatus> {
    let (k, ncols) = (l.k(), l.ncols());
    l.check_x(x, ld_x)?;
    let nb = k / QK_PQ2_0;
    let cols = ncols * ith / nth..ncols * (ith + 1) / nth;
    for c in cols {
        // SAFETY: column c's quads lie within the layout's words (ncols * nb quads, column
        // after column) and its scale within the ncols floats after them, all inside the
        // work buffer; this share alone owns column c, so neither `&mut` aliases another.
        let (quads, s) = unsafe {
            let quads = work.cast::<BlockQ8_0Quad>().add(c * nb);
            let s = work.cast::<u8>().add(l.work_bytes()).cast::<f32>().add(c);
            (std::slice::from_raw_parts_mut(quads, nb), &mut *s)
        };
        *s = quantize_row_i8_quads(&x[c * ld_x..c * ld_x + k], quads);
    }
    Ok(())
}

/// Quantizes `x` through ggml's `from_float` into ggml blocks on the stack, then into quads.
fn ggml_q8_0(
    f: unsafe extern "C" fn(*const f32, *mut c_void, i64),
    x: &[f32],
    quads: &mut [BlockQ8_0Quad],
) {
    const QUAD_BYTES: usize = 4 * GGML_Q8_0_BLOCK_BYTES;
    // u16 elements: ggml's block_q8_0 is 2-byte aligned.
    let mut tmp = [0u16; QUADS_PER_CALL * QUAD_BYTES / 2];
    for (xs, qs) in x
        .chunks(QUADS_PER_CALL * QK_PQ2_0)
        .zip(quads.chunks_mut(QUADS_PER_CALL))
    {
        // SAFETY: `xs` holds `xs.len()` floats (a multiple of 128) and `tmp` room for
        // `xs.len() / 32` blocks, which is what `from_float` writes by the caller's contract.
        unsafe { f(xs.as_ptr(), tmp.as_mut_ptr().cast(), xs.len() as i64) };
        let raw: &[u8] = bytemuck::cast_slice(&tmp);
        for (q, b) in qs.iter_mut().zip(raw.chunks_exact(QUAD_BYTES)) {
            *q = BlockQ8_0Quad::from_ggml(b.try_into().expect("one quad of ggml blocks"));
        }
    }
}

/// How many row chunks to hand out for `nth` threads (`*out_chunks`): several per thread, so a
/// thread that is descheduled on a busy machine does not hold the others up, one for a
/// product too small to be worth splitting. Take chunks from a shared counter.
///
/// # Safety
/// `plan` from [`t2p_plan_init`]; `out_chunks` a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_plan_chunk_count(
    plan: *const T2pPlan,
    nth: usize,
    out_chunks: *mut usize,
) -> T2pStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { plan_from(plan) }?;
        write_out(out_chunks, c.m.chunk_count(nth))
    })
}

/// Rows `[*row_begin, *row_end)` of chunk `i` of `n_chunks`: whole row groups, the last chunk
/// ending at `rows`; empty when there are more chunks than row groups.
///
/// # Safety
/// `plan` from [`t2p_plan_init`]; `row_begin`, `row_end` writable `size_t`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn t2p_plan_chunk_rows(
    plan: *const T2pPlan,
    i: usize,
    n_chunks: usize,
    row_begin: *mut usize,
    row_end: *mut usize,
) -> T2pStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let m = unsafe { plan_from(plan) }?.m;
        if n_chunks == 0 || i >= n_chunks || row_end.is_null() {
            return Err(if row_end.is_null() {
                T2pStatus::NullPointer
            } else {
                T2pStatus::InvalidArgument
            });
        }
        let r = m.chunk_rows(i, n_chunks);
        write_out(row_begin, r.start)?;
        write_out(row_end, r.end)
    })
}

/// Computes rows `row_begin..row_end` (a chunk from [`t2p_plan_chunk_rows`], or any range on
/// row-group boundaries; the end may be `rows`) of every column into
/// `out[c * ld_out + r]` from the quantized activations in `work`, on ISA path `isa`
/// (`T2P_ISA_ACTIVE`, or a `T2P_ISA_*` such as `T2P_ISA_SCALAR`, the exact integer oracle every
/// path equals bit for bit). `w` is the whole `rows x k` T2P matrix (`t2p_repack_size` bytes,
/// 2-byte aligned). `ld_out >= rows` unless `ncols == 1`;
/// `out_len >= (ncols - 1) * ld_out + row_end`. Only the range's outputs are written, so
/// threads may compute disjoint ranges of the same `out` at once.
///
/// # Safety
/// `plan` from [`t2p_plan_init`]; `w`/`work` readable for `w_bytes`/`work_bytes` bytes, with
/// every share of `work` quantized; `out` writable for `out_len` floats.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn t2p_plan_compute(
    plan: *const T2pPlan,
    isa: u32,
    w: *const c_void,
    w_bytes: usize,
    work: *const c_void,
    work_bytes: usize,
    out: *mut f32,
    ld_out: usize,
    out_len: usize,
    row_begin: usize,
    row_end: usize,
) -> T2pStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let Checked {
            m,
            scale_group,
            int8,
            ..
        } = unsafe { plan_from(plan) }?;
        let kern: &Kernels = if isa == T2P_ISA_ACTIVE {
            kernels::active()
        } else {
            Kernels::for_isa(Isa::from_u32(isa)?)?
        };
        let (rows, k, ncols) = (m.rows(), m.layout().k(), m.layout().ncols());
        // SAFETY: readable for w_bytes by the caller's contract.
        let w_buf = unsafe { bytes(w, w_bytes) }?;
        let n = t2p_block_count(rows, k)?;
        let w = if scale_group == 64 {
            T2pSlice::G64(blocks::<BlockT2pG64>(w_buf, n)?)
        } else {
            T2pSlice::G128(blocks::<BlockT2p>(w_buf, n)?)
        };
        // SAFETY: readable for work_bytes by the caller's contract.
        let work_buf = unsafe { bytes(work, work_bytes) }?;
        let work = blocks::<u32>(work_buf, m.layout().work_words())?;
        // BitNet: the rows' scales after the blocks, the columns' after the quads.
        let (row_scales, col_scales): (&[f32], &[f32]) = if int8 {
            let too_small = T2pStatus::BufferTooSmall;
            let w_rest = w_buf.get(n * size_of::<BlockT2p>()..).ok_or(too_small)?;
            let work_rest = work_buf.get(m.layout().work_bytes()..).ok_or(too_small)?;
            (
                blocks::<f32>(w_rest, rows)?,
                blocks::<f32>(work_rest, ncols)?,
            )
        } else {
            (&[], &[])
        };
        let scale = |r: usize, c: usize| int8_output_scale(row_scales[r], col_scales[c]);
        if row_begin > row_end || row_end > rows || (ncols > 1 && ld_out < rows) {
            return Err(T2pStatus::InvalidShape);
        }
        let need = (ncols - 1)
            .checked_mul(ld_out)
            .and_then(|v| v.checked_add(row_end))
            .ok_or(T2pStatus::InvalidShape)?;
        floats_len(out, out_len, need)?;
        let n = row_end - row_begin;
        if ncols == 1 {
            // SAFETY: row_end <= out_len (checked); only this call's rows are borrowed, so
            // concurrent calls on disjoint ranges never alias.
            let o = unsafe { std::slice::from_raw_parts_mut(out.add(row_begin), n) };
            m.compute(kern, w, work, row_begin..row_end, o, 0)?;
            if int8 {
                for (i, v) in o.iter_mut().enumerate() {
                    *v *= scale(row_begin + i, 0);
                }
            }
            return Ok(());
        }
        Ok(with_scratch(|scratch| {
            m.compute_columns(kern, w, work, row_begin..row_end, scratch, |c, v| {
                // SAFETY: c * ld_out + row_end <= need <= out_len (checked); this column's
                // piece of the range belongs to this call only.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(out.add(c * ld_out + row_begin), n) };
                dst.copy_from_slice(v);
                if int8 {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d *= scale(row_begin + i, c);
                    }
                }
            })
        })?)
    })
}
