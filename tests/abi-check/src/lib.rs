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
    t2p_repack_pq2_0(_, _, _, _, _, _);
    t2p_unpack_to_pq2_0(_, _, _, _, _, _);
    t2p_activation_size(_, _, _, _);
    t2p_quantize_q8_K(_, _, _, _);
    t2p_quantize_q8_K_x4(_, _, _, _, _, _);
    t2p_gemv(_, _, _, _, _, _, _, _, _, _);
    t2p_gemv_reference(_, _, _, _, _, _, _, _, _, _);
    t2p_gemm(_, _, _, _, _, _, _, _, _, _, _, _);
    t2p_gemm_reference(_, _, _, _, _, _, _, _, _, _, _, _);
    t2p_vec_dot_pq2_0_q8_K(_, _, _, _, _, _, _, _);
    t2p_source_size(_, _, _, _);
    t2p_repack_to_t2p(_, _, _, _, _, _, _);
    t2p_unpack_to_source(_, _, _, _, _, _, _);
    t2p_activation_size_q8_0(_, _, _);
    t2p_quantize_q8_0(_, _, _, _);
    t2p_q8_0_from_ggml(_, _, _, _, _);
    t2p_gemv_q8_0(_, _, _, _, _, _, _, _, _, _);
    t2p_gemv_q8_0_reference(_, _, _, _, _, _, _, _, _, _);
    t2p_gemm_q8_0(_, _, _, _, _, _, _, _, _, _, _, _);
    t2p_gemm_q8_0_reference(_, _, _, _, _, _, _, _, _, _, _, _);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, size_of};
    use t2p::format::{BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p};

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
    fn struct_layouts_agree() {
        assert_eq!(
            (
                size_of::<c::t2p_block_pq2_0>(),
                align_of::<c::t2p_block_pq2_0>()
            ),
            (size_of::<BlockPq2_0>(), align_of::<BlockPq2_0>())
        );
        assert_eq!(
            (
                size_of::<c::t2p_block_t2p>(),
                align_of::<c::t2p_block_t2p>()
            ),
            (size_of::<BlockT2p>(), align_of::<BlockT2p>())
        );
        assert_eq!(
            (
                size_of::<c::t2p_block_q8_K>(),
                align_of::<c::t2p_block_q8_K>()
            ),
            (size_of::<BlockQ8K>(), align_of::<BlockQ8K>())
        );
        assert_eq!(
            (
                size_of::<c::t2p_block_q8_K_x4>(),
                align_of::<c::t2p_block_q8_K_x4>()
            ),
            (size_of::<BlockQ8Kx4>(), align_of::<BlockQ8Kx4>())
        );
        // Field offsets: clang's view (bindgen) against the Rust structs.
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_q8_K, bsums),
            std::mem::offset_of!(BlockQ8K, bsums)
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_q8_K_x4, bsums),
            std::mem::offset_of!(BlockQ8Kx4, bsums)
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_t2p, qs),
            std::mem::offset_of!(BlockT2p, qs)
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_pq2_0, qs),
            std::mem::offset_of!(BlockPq2_0, qs)
        );
        assert_eq!(
            size_of::<c::t2p_block_tq1_0>(),
            size_of::<t2p::format::BlockTq1_0>()
        );
        assert_eq!(
            size_of::<c::t2p_block_tq2_0>(),
            size_of::<t2p::format::BlockTq2_0>()
        );
        assert_eq!(
            size_of::<c::t2p_block_ptq1_0>(),
            size_of::<t2p::format::BlockPtq1_0>()
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_tq1_0, d),
            std::mem::offset_of!(t2p::format::BlockTq1_0, d)
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_ptq1_0, qh),
            std::mem::offset_of!(t2p::format::BlockPtq1_0, qh)
        );
        assert_eq!(
            (c::T2P_PQ2_0_BLOCK_BYTES, c::T2P_T2P_BLOCK_BYTES),
            (34, 136)
        );
        assert_eq!(
            (c::T2P_Q8_K_BLOCK_BYTES, c::T2P_Q8_K_X4_BLOCK_BYTES),
            (292, 1168)
        );
        assert_eq!(
            (
                size_of::<c::t2p_block_q8_0_quad>(),
                align_of::<c::t2p_block_q8_0_quad>()
            ),
            (size_of::<BlockQ8_0Quad>(), align_of::<BlockQ8_0Quad>())
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_q8_0_quad, sums),
            std::mem::offset_of!(BlockQ8_0Quad, sums)
        );
        assert_eq!(
            std::mem::offset_of!(c::t2p_block_q8_0_quad, qs),
            std::mem::offset_of!(BlockQ8_0Quad, qs)
        );
        assert_eq!(
            (c::T2P_Q8_0_QUAD_BLOCK_BYTES, c::T2P_GGML_Q8_0_BLOCK_BYTES),
            (160, 34)
        );
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
                c::T2P_ISA_AVX_VNNI
            ],
            [
                r::T2P_ISA_SCALAR,
                r::T2P_ISA_AVX2,
                r::T2P_ISA_NEON,
                r::T2P_ISA_NEON_DOTPROD,
                r::T2P_ISA_NEON_I8MM,
                r::T2P_ISA_AVX_VNNI
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
                c::T2P_CPU_I8MM
            ],
            [
                r::T2P_CPU_AVX2,
                r::T2P_CPU_FMA,
                r::T2P_CPU_F16C,
                r::T2P_CPU_AVX512F,
                r::T2P_CPU_NEON,
                r::T2P_CPU_DOTPROD,
                r::T2P_CPU_I8MM
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
        assert_eq!(size_of::<r::T2pStatus>(), size_of::<c_raw::T2pStatus>());
    }
}
