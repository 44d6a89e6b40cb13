//! The one table of each path: its T2P kernels, its ggml block-type kernels, its F16 rows and
//! its attention loops, put together at compile time. Which table runs is decided once, by the
//! one CPU detection ([`super::cpu`], through [`Isa::is_supported`]); a table only names the
//! kernels compiled for its own path's features, or the scalar references, so a path that has no
//! step of its own for something names the reference (or another path's step it shares)
//! explicitly here.

#[cfg(target_arch = "aarch64")]
use super::aarch64;
use super::act::ActKernels;
use super::attention::AttentionKernels;
use super::f16::F16Kernel;
use super::quant::QuantKernels;
#[cfg(target_arch = "x86_64")]
use super::x86_64;
use super::{Isa, Kernels, T2pKernels, act, attention, f16, quant, scalar};
use crate::format::GgmlType;

/// Every path's table, at its [`Isa`] number; `None` for the paths of other targets.
static TABLES: [Option<Kernels>; Isa::ALL.len()] = {
    let mut tables = [const { None }; Isa::ALL.len()];
    let mut i = 0;
    while i < Isa::ALL.len() {
        tables[Isa::ALL[i] as usize] = compose(Isa::ALL[i]);
        i += 1;
    }
    tables
};

/// The table of `isa` if this build has one, whether or not this CPU runs it.
pub(super) fn table(isa: Isa) -> Option<&'static Kernels> {
    TABLES[isa as usize].as_ref()
}

/// The path's parts, each checked to be compiled for it.
const fn compose(isa: Isa) -> Option<Kernels> {
    let Some(t2p) = t2p(isa) else {
        return None;
    };
    assert!(
        t2p.isa as u32 == isa as u32,
        "a T2P table in the wrong place"
    );
    let (f16, attention) = float_loops(isa);
    Some(Kernels {
        isa,
        t2p,
        quant: quant(isa),
        f16,
        attention,
        act: act(isa),
    })
}

/// The activation quantizer built for AVX2 or AVX-512 on the x86 paths, the reference
/// elsewhere.
const fn act(isa: Isa) -> ActKernels {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => x86_64::act::AVX2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni | Isa::Amx => x86_64::act::AVX512,
        _ => act::SCALAR,
    }
}

const fn t2p(isa: Isa) -> Option<&'static T2pKernels> {
    match isa {
        Isa::Scalar => Some(&scalar::KERNELS),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni | Isa::Amx => x86_64::t2p(isa),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => aarch64::t2p(isa),
        _ => None,
    }
}

/// AVX2 for the AVX2 path, its `vpdpbusd` steps for the 32-weight types with unsigned codes on
/// AVX-VNNI, the AVX-512 table (its own Q6_K, the same `vpdpbusd` steps, AVX2's other types) on
/// the AVX-512 and AMX ones, SDOT for the aarch64 paths with dotprod, the scalar reference elsewhere.
const fn quant(isa: Isa) -> &'static QuantKernels {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => &x86_64::quant::KERNELS,
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => &x86_64::quant_vnni::KERNELS,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni | Isa::Amx => &x86_64::quant_zmm::KERNELS,
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod | Isa::NeonI8mm => &aarch64::quant::KERNELS,
        _ => &quant::scalar::KERNELS,
    }
}

/// The F16 rows and the attention loops: two ymm registers of lanes and AVX2 + F16C on the AVX2
/// and AVX-VNNI paths, a zmm and AVX-512 on the AVX-512 one; on aarch64 four q registers of
/// lanes and the attention reference (the compiler vectorises its f32 loops with NEON).
const fn float_loops(isa: Isa) -> (F16Kernel, AttentionKernels) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni => (x86_64::f16::AVX2, x86_64::attention::AVX2),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni | Isa::Amx => (x86_64::f16::AVX512, x86_64::attention::AVX512),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => (aarch64::f16::NEON, attention::SCALAR),
        _ => (f16::SCALAR, attention::SCALAR),
    }
}

/// Which implementation `isa` runs for the ggml block type `ty` (for `libt2p info` / `bench`).
pub fn quant_path_name(isa: Isa, ty: GgmlType) -> &'static str {
    quant(isa).path(ty)
}

/// Which implementation `isa` runs for F16 matrices (for tools).
pub fn f16_path_name(isa: Isa) -> &'static str {
    float_loops(isa).0.path
}

/// Which implementation `isa`'s attention runs over an f16 KV cache (for tools).
pub fn attention_path_name(isa: Isa) -> &'static str {
    float_loops(isa).1.path
}
