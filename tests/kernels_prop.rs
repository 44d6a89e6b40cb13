//! Property tests: random shapes and contents on every ISA path, bit-identical to the oracle;
//! repack and interleave round trips.

mod common;

use common::*;
use proptest::prelude::*;
use t2p::format::{
    BlockPq2_0, BlockQ8K, QK_K, deinterleave_q8k_x4, interleave_q8k_x4, unpack_t2p_to_pq2_0,
};
use t2p::matmul::{QuantizedBatch, T2pMatrix, matmul};

fn config() -> ProptestConfig {
    // Few cases by default so emulated runs stay short; PROPTEST_CASES raises it.
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(48),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_path_matches_the_oracle(
        groups in 1usize..5, kb in 1usize..5, ncols in 1usize..10, seed in any::<u64>(),
        scale in prop_oneof![Just(0.0f32), -4.0f32..4.0, Just(1e-30f32), Just(6.0e4f32)],
    ) {
        let (rows, k) = (4 * groups, 256 * kb);
        let mut rng = Lcg(seed);
        let pq = ternary_tensor::<BlockPq2_0>(rows, k, Codes::Random, Scales::Random, &mut rng);
        let w = T2pMatrix::from_pq2_0(&pq, rows, k).unwrap();
        let x: Vec<f32> = (0..k * ncols).map(|_| (rng.next() as f32 / u32::MAX as f32 - 0.5) * scale).collect();
        let act = QuantizedBatch::new(&x, k, ncols, t2p::matmul::ActQuant::Q8K).unwrap();
        let want = matmul(oracle(), &w, &act).unwrap();
        assert_every_path(&want, &format!("{rows}x{k}x{ncols}"), |kern| matmul(kern, &w, &act).unwrap());
    }

    #[test]
    fn repack_round_trips(groups in 1usize..4, kb in 1usize..4, seed in any::<u64>()) {
        let (rows, k) = (4 * groups, 256 * kb);
        let pq = ternary_tensor::<BlockPq2_0>(rows, k, Codes::Random, Scales::Random, &mut Lcg(seed));
        let t = repacked_pq2_0(&pq, rows, k);
        let mut back = vec![BlockPq2_0::default(); pq.len()];
        unpack_t2p_to_pq2_0(&t, rows, k, &mut back).unwrap();
        prop_assert_eq!(back, pq);
    }

    #[test]
    fn q8k_x4_interleave_round_trips(seed in any::<u64>()) {
        let cols = act_columns::<BlockQ8K>(QK_K, 4, Acts::Random, false, &mut Lcg(seed));
        let x4 = interleave_q8k_x4([&cols[0], &cols[1], &cols[2], &cols[3]]);
        for (c, col) in cols.iter().enumerate() {
            prop_assert_eq!(&deinterleave_q8k_x4(&x4, c), col);
        }
    }
}
