//! Runtime CPU feature detection, as a stable bit set (the C ABI's `T2P_CPU_*` values): the
//! one place that asks the CPU; a path runs where it has [`crate::kernels::Isa::required_features`].

use std::sync::OnceLock;

/// x86_64 AVX2.
pub const AVX2: u32 = 1 << 0;
/// x86_64 FMA.
pub const FMA: u32 = 1 << 1;
/// x86_64 F16C (fp16 conversions).
pub const F16C: u32 = 1 << 2;
/// x86_64 AVX-512F.
pub const AVX512F: u32 = 1 << 3;
/// x86_64 AVX-512 VNNI together with AVX-512 BW and VL (the `avx512-vnni` path's needs).
pub const AVX512_VNNI: u32 = 1 << 4;
/// x86_64 AVX-VNNI (VEX-encoded `vpdpbusd`).
pub const AVX_VNNI: u32 = 1 << 5;
/// x86_64 GFNI (Galois-field affine transforms; the AVX-512 VNNI gemv's decode uses them
/// where the CPU has them).
pub const GFNI: u32 = 1 << 6;
/// x86_64 AMX-TILE and AMX-INT8, with the tile state granted to this process by Linux
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM)`, asked once at detection).
pub const AMX: u32 = 1 << 7;
/// aarch64 Advanced SIMD.
pub const NEON: u32 = 1 << 8;
/// aarch64 dot product (SDOT).
pub const DOTPROD: u32 = 1 << 9;
/// aarch64 int8 matrix multiply (SMMLA).
pub const I8MM: u32 = 1 << 10;

const NAMES: [(u32, &str); 11] = [
    (AVX2, "avx2"),
    (FMA, "fma"),
    (F16C, "f16c"),
    (AVX512F, "avx512f"),
    (AVX512_VNNI, "avx512vnni"),
    (AVX_VNNI, "avxvnni"),
    (GFNI, "gfni"),
    (AMX, "amx"),
    (NEON, "neon"),
    (DOTPROD, "dotprod"),
    (I8MM, "i8mm"),
];

/// The features of this CPU that t2p knows about (detected once).
pub fn features() -> u32 {
    static FEATURES: OnceLock<u32> = OnceLock::new();
    *FEATURES.get_or_init(detect)
}

fn detect() -> u32 {
    let mut f = 0;
    #[cfg(target_arch = "x86_64")]
    {
        for (bit, on) in [
            (AVX2, std::arch::is_x86_feature_detected!("avx2")),
            (FMA, std::arch::is_x86_feature_detected!("fma")),
            (F16C, std::arch::is_x86_feature_detected!("f16c")),
            (AVX512F, std::arch::is_x86_feature_detected!("avx512f")),
            (
                AVX512_VNNI,
                std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl"),
            ),
            (AVX_VNNI, std::arch::is_x86_feature_detected!("avxvnni")),
            (GFNI, std::arch::is_x86_feature_detected!("gfni")),
            (AMX, amx_granted()),
        ] {
            if on {
                f |= bit;
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        for (bit, on) in [
            (NEON, std::arch::is_aarch64_feature_detected!("neon")),
            (DOTPROD, std::arch::is_aarch64_feature_detected!("dotprod")),
            (I8MM, std::arch::is_aarch64_feature_detected!("i8mm")),
        ] {
            if on {
                f |= bit;
            }
        }
    }
    f
}

/// Whether the CPU lists AMX-TILE and AMX-INT8 (CPUID leaf 7: EDX bits 24 and 25) and Linux
/// grants this process the tile data state, which it must before the first tile instruction.
/// A refusal is said once on stderr: the AVX-512 path runs instead.
#[cfg(target_arch = "x86_64")]
fn amx_granted() -> bool {
    // Leaf 7 exists on every CPU with AVX2, which every x86 path needs anyway.
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    if leaf7.edx & (3 << 24) != 3 << 24 {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes this process's permitted
        // xsave features; it reads and writes no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        if r != 0 {
            eprintln!(
                "t2p: the CPU has AMX but Linux refused the tile state ({}); using avx512-vnni",
                std::io::Error::last_os_error()
            );
        }
        r == 0
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Names of the features in `bits`, in a fixed order.
pub fn feature_names(bits: u32) -> Vec<&'static str> {
    NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|&(_, n)| n)
        .collect()
}
