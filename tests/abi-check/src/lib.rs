//! Agreement of `include/t2p.h` with the Rust C ABI, checked by the compiler and by tests.

/// The header as clang sees it.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs
)]
pub mod c {
    include!(concat!(env!("OUT_DIR"), "/t2p_c.rs"));
}

/// The header as clang sees it, with its own status typedef and enumerators.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs
)]
pub mod c_raw {
    include!(concat!(env!("OUT_DIR"), "/t2p_c_raw.rs"));
}

/// Compiles only if every listed function has the same signature in the header and in Rust
/// (both coerce to one function-pointer type), and returns the names checked.
macro_rules! same_signatures {
    ($($name:ident($($arg:tt),*);)*) => {
        pub fn checked_functions() -> Vec<&'static str> {
            $( let _: [unsafe extern "C" fn($($arg),*) -> _; 2] = [c::$name, t2p::ffi::$name]; )*
            vec![$(stringify!($name)),*]
        }
    };
}

same_signatures! {
    t2p_version();
    t2p_version_number();
    t2p_cpu_features();
    t2p_status_string(_);
    t2p_isa_name(_);
    t2p_isa_supported(_);
    t2p_active_isa();
    t2p_set_isa(_);
    t2p_repack_size(_, _, _);
    t2p_source_size(_, _, _, _);
    t2p_repacked_size(_, _, _, _);
    t2p_repack(_, _, _, _, _, _, _);
    t2p_unpack(_, _, _, _, _, _, _);
    t2p_vec_dot_pq2_0_q8_K(_, _, _, _, _, _, _, _);
    t2p_plan_init(_, _, _, _, _);
    t2p_plan_init_for(_, _, _, _, _, _);
    t2p_plan_quantize(_, _, _, _, _, _, _, _, _);
    t2p_plan_chunk_count(_, _, _);
    t2p_plan_chunk_rows(_, _, _, _, _);
    t2p_plan_compute(_, _, _, _, _, _, _, _, _, _, _);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, size_of};
    use t2p::format::{BlockPq2_0, BlockQ8K, BlockQ8Kx4, BlockT2p, BlockT2pG64};

    #[test]
    fn every_header_function_is_compared() {
        let header = include_str!("../../../include/t2p.h");
        let mut declared: Vec<&str> = header
            .lines()
            .filter_map(|l| l.find("t2p_").map(|i| &l[i..]))
            .filter_map(|l| l.split_once('(').map(|(name, _)| name))
            .filter(|name| {
                name.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            })
            .collect();
        declared.sort();
        declared.dedup();
        let mut checked = checked_functions();
        checked.sort();
        assert_eq!(
            declared, checked,
            "functions in include/t2p.h vs functions compared"
        );
    }

    #[test]
    fn plan_layout_agrees() {
        use std::mem::offset_of;
        use t2p::ffi::T2pPlan;
        assert_eq!(
            (size_of::<c_raw::T2pPlan>(), align_of::<c_raw::T2pPlan>()),
            (size_of::<T2pPlan>(), align_of::<T2pPlan>())
        );
        assert_eq!(offset_of!(c_raw::T2pPlan, act), offset_of!(T2pPlan, act));
        assert_eq!(offset_of!(c_raw::T2pPlan, rows), offset_of!(T2pPlan, rows));
        assert_eq!(offset_of!(c_raw::T2pPlan, k), offset_of!(T2pPlan, k));
        assert_eq!(
            offset_of!(c_raw::T2pPlan, ncols),
            offset_of!(T2pPlan, ncols)
        );
        assert_eq!(
            offset_of!(c_raw::T2pPlan, work_bytes),
            offset_of!(T2pPlan, work_bytes)
        );
        assert_eq!(
            offset_of!(c_raw::T2pPlan, scale_group),
            offset_of!(T2pPlan, scale_group)
        );
    }

    #[test]
    fn block_sizes_agree() {
        assert_eq!(
            (
                c::T2P_PQ2_0_BLOCK_BYTES as usize,
                c::T2P_T2P_BLOCK_BYTES as usize
            ),
            (size_of::<BlockPq2_0>(), size_of::<BlockT2p>())
        );
        assert_eq!(
            c::T2P_T2P_G64_BLOCK_BYTES as usize,
            size_of::<BlockT2pG64>()
        );
        assert_eq!(c::T2P_TYPE_Q2_0, t2p::ffi::T2P_TYPE_Q2_0);
        assert_eq!(
            (
                c::T2P_Q8_K_BLOCK_BYTES as usize,
                c::T2P_Q8_K_X4_BLOCK_BYTES as usize
            ),
            (size_of::<BlockQ8K>(), size_of::<BlockQ8Kx4>())
        );
    }

    /// The header holds the C ABI only: every type, constant and function is `t2p_*`, `T2P_*`
    /// or `T2pPlan` / `T2pStatus` / `T2pQ8_0FromFloat` (cbindgen reads src/ffi only).
    #[test]
    fn header_has_no_rust_internals() {
        let header = include_str!("../../../include/t2p.h");
        for line in header.lines() {
            let decl = line
                .strip_prefix("#define ")
                .or_else(|| line.strip_prefix("typedef struct "))
                .or_else(|| line.strip_prefix("enum "));
            if let Some(rest) = decl {
                let name = rest.split([' ', '(', '{']).next().unwrap_or("");
                assert!(
                    name.starts_with("T2P") || name.starts_with("T2p"),
                    "include/t2p.h declares {name:?}"
                );
            }
        }
    }

    #[test]
    fn constants_agree() {
        use t2p::ffi as r;
        assert_eq!(
            [
                c::T2P_ISA_SCALAR,
                c::T2P_ISA_AVX2,
                c::T2P_ISA_NEON,
                c::T2P_ISA_NEON_DOTPROD,
                c::T2P_ISA_NEON_I8MM,
                c::T2P_ISA_AVX_VNNI,
                c::T2P_ISA_AVX512_VNNI
            ],
            [
                r::T2P_ISA_SCALAR,
                r::T2P_ISA_AVX2,
                r::T2P_ISA_NEON,
                r::T2P_ISA_NEON_DOTPROD,
                r::T2P_ISA_NEON_I8MM,
                r::T2P_ISA_AVX_VNNI,
                r::T2P_ISA_AVX512_VNNI
            ]
        );
        assert_eq!(
            [
                c::T2P_CPU_AVX2,
                c::T2P_CPU_FMA,
                c::T2P_CPU_F16C,
                c::T2P_CPU_AVX512F,
                c::T2P_CPU_NEON,
                c::T2P_CPU_DOTPROD,
                c::T2P_CPU_I8MM,
                c::T2P_CPU_AVX512_VNNI,
                c::T2P_CPU_AVX_VNNI
            ],
            [
                r::T2P_CPU_AVX2,
                r::T2P_CPU_FMA,
                r::T2P_CPU_F16C,
                r::T2P_CPU_AVX512F,
                r::T2P_CPU_NEON,
                r::T2P_CPU_DOTPROD,
                r::T2P_CPU_I8MM,
                r::T2P_CPU_AVX512_VNNI,
                r::T2P_CPU_AVX_VNNI
            ]
        );
        // The status enumerators as clang numbers them.
        assert_eq!(c_raw::T2P_STATUS_OK, r::T2pStatus::Ok as u32);
        assert_eq!(
            c_raw::T2P_STATUS_NULL_POINTER,
            r::T2pStatus::NullPointer as u32
        );
        assert_eq!(
            c_raw::T2P_STATUS_INVALID_SHAPE,
            r::T2pStatus::InvalidShape as u32
        );
        assert_eq!(
            c_raw::T2P_STATUS_BUFFER_TOO_SMALL,
            r::T2pStatus::BufferTooSmall as u32
        );
        assert_eq!(
            c_raw::T2P_STATUS_MISALIGNED,
            r::T2pStatus::Misaligned as u32
        );
        assert_eq!(
            c_raw::T2P_STATUS_UNSUPPORTED_ISA,
            r::T2pStatus::UnsupportedIsa as u32
        );
        assert_eq!(
            c_raw::T2P_STATUS_INVALID_ARGUMENT,
            r::T2pStatus::InvalidArgument as u32
        );
        assert_eq!(c_raw::T2P_STATUS_PANIC, r::T2pStatus::Panic as u32);
        assert_eq!(
            [c::T2P_ACT_Q8_K, c::T2P_ACT_Q8_0, c::T2P_ISA_ACTIVE],
            [r::T2P_ACT_Q8_K, r::T2P_ACT_Q8_0, r::T2P_ISA_ACTIVE]
        );
        assert_eq!(
            [
                c::T2P_TYPE_PQ2_0,
                c::T2P_TYPE_Q2_0_G128,
                c::T2P_TYPE_TQ1_0,
                c::T2P_TYPE_TQ2_0,
                c::T2P_TYPE_PTQ1_0
            ],
            [
                r::T2P_TYPE_PQ2_0,
                r::T2P_TYPE_Q2_0_G128,
                r::T2P_TYPE_TQ1_0,
                r::T2P_TYPE_TQ2_0,
                r::T2P_TYPE_PTQ1_0
            ]
        );
        assert_eq!(size_of::<r::T2pStatus>(), size_of::<c_raw::T2pStatus>());
    }
}
