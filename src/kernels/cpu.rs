//! Runtime CPU feature detection, as a stable bit set (the C ABI's `T2P_CPU_*` values).

// The bits are the C ABI's, defined once there (the header carries them as literals).
pub use crate::ffi::{
    T2P_CPU_AVX_VNNI as AVX_VNNI, T2P_CPU_AVX2 as AVX2, T2P_CPU_AVX512_VNNI as AVX512_VNNI,
    T2P_CPU_AVX512F as AVX512F, T2P_CPU_DOTPROD as DOTPROD, T2P_CPU_F16C as F16C,
    T2P_CPU_FMA as FMA, T2P_CPU_I8MM as I8MM, T2P_CPU_NEON as NEON,
};

const NAMES: [(u32, &str); 9] = [
    (AVX2, "avx2"),
    (FMA, "fma"),
    (F16C, "f16c"),
    (AVX512F, "avx512f"),
    (AVX512_VNNI, "avx512vnni"),
    (AVX_VNNI, "avxvnni"),
    (NEON, "neon"),
    (DOTPROD, "dotprod"),
    (I8MM, "i8mm"),
];

/// The features of this CPU that t2p knows about.
pub fn features() -> u32 {
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

/// Names of the features in `bits`, in a fixed order.
pub fn feature_names(bits: u32) -> Vec<&'static str> {
    NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|&(_, n)| n)
        .collect()
}
