//! The x86 builds of the activation loops: [`quantize_row_q8_0`], [`quantize_q8k_x4`],
//! [`silu_mul`], [`delta_rule`] and [`fwht_blocks`] inlined into functions compiled for AVX2
//! and for AVX-512 (the portable build has SSE2 only: its loops run a lane or four at a
//! time). Same source, same bits.

use crate::format::{BlockQ8_0Quad, BlockQ8Kx4, quantize_q8k_x4, quantize_row_q8_0};
use crate::kernels::act::{ActKernels, silu_mul};
use crate::kernels::delta::{DeltaSeq, delta_rule};
use crate::kernels::fwht::fwht_blocks;

/// The AVX2 and AVX-VNNI paths' activation loops.
pub(in crate::kernels) const AVX2: ActKernels = ActKernels::new(
    q8_0_row_avx2,
    q8k_x4_avx2,
    silu_mul_avx2,
    delta_rule_avx2,
    fwht_avx2,
);
/// The AVX-512 VNNI path's activation loops.
pub(in crate::kernels) const AVX512: ActKernels = ActKernels::new(
    q8_0_row_avx512,
    q8k_x4_avx512,
    silu_mul_avx512,
    delta_rule_avx512,
    fwht_avx512,
);

fn delta_rule_avx2(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
    // SAFETY: as in `q8_0_row_avx2`: only the x86 paths' tables hold this entry.
    unsafe { delta_avx2(state, seq, out) }
}

fn delta_rule_avx512(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
    // SAFETY: as in `q8_0_row_avx512`: only the AVX-512 VNNI path's table holds this entry.
    unsafe { delta_avx512(state, seq, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn delta_avx2(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
    delta_rule(state, seq, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn delta_avx512(state: &mut [f32], seq: &DeltaSeq<'_>, out: &mut [f32]) {
    delta_rule(state, seq, out)
}

fn fwht_avx2(x: &mut [f32], block: usize) {
    // SAFETY: as in `q8_0_row_avx2`: only the x86 paths' tables hold this entry.
    unsafe { fwht_blocks_avx2(x, block) }
}

fn fwht_avx512(x: &mut [f32], block: usize) {
    // SAFETY: as in `q8_0_row_avx512`: only the AVX-512 VNNI path's table holds this entry.
    unsafe { fwht_blocks_avx512(x, block) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn fwht_blocks_avx2(x: &mut [f32], block: usize) {
    fwht_blocks(x, block)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn fwht_blocks_avx512(x: &mut [f32], block: usize) {
    fwht_blocks(x, block)
}

fn silu_mul_avx2(gate: &mut [f32], up: &[f32]) {
    // SAFETY: as in `q8_0_row_avx2`: only the x86 paths' tables hold this entry.
    unsafe { silu_avx2(gate, up) }
}

fn silu_mul_avx512(gate: &mut [f32], up: &[f32]) {
    // SAFETY: as in `q8_0_row_avx512`: only the AVX-512 VNNI path's table holds this entry.
    unsafe { silu_avx512(gate, up) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn silu_avx2(gate: &mut [f32], up: &[f32]) {
    silu_mul(gate, up)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn silu_avx512(gate: &mut [f32], up: &[f32]) {
    silu_mul(gate, up)
}

fn q8_0_row_avx2(x: &[f32], out: &mut [BlockQ8_0Quad]) {
    // SAFETY: this entry is only in the x86 paths' tables, which are handed out only on CPUs
    // with AVX2, FMA and F16C (`Isa::required_features`).
    unsafe { avx2(x, out) }
}

fn q8_0_row_avx512(x: &[f32], out: &mut [BlockQ8_0Quad]) {
    // SAFETY: this entry is only in the AVX-512 VNNI path's table, handed out only on CPUs with
    // AVX-512 F/BW/VL as well as AVX2, FMA and F16C.
    unsafe { avx512(x, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn avx2(x: &[f32], out: &mut [BlockQ8_0Quad]) {
    quantize_row_q8_0(x, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn avx512(x: &[f32], out: &mut [BlockQ8_0Quad]) {
    quantize_row_q8_0(x, out)
}

fn q8k_x4_avx2(cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]) {
    // SAFETY: as in `q8_0_row_avx2`: only the x86 paths' tables hold this entry.
    unsafe { q8k_avx2(cols, k, out) }
}

fn q8k_x4_avx512(cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]) {
    // SAFETY: as in `q8_0_row_avx512`: only the AVX-512 VNNI path's table holds this entry.
    unsafe { q8k_avx512(cols, k, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn q8k_avx2(cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]) {
    quantize_q8k_x4(cols, k, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
fn q8k_avx512(cols: &[&[f32]], k: usize, out: &mut [BlockQ8Kx4]) {
    quantize_q8k_x4(cols, k, out)
}
