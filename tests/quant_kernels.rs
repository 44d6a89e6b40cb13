//! ggml block types (Q4_0 ... Q6_K) on every ISA path this CPU runs, bit for bit against the
//! scalar reference: random bytes (every code and bit pattern), extreme activations (-128 and
//! 127 everywhere), all-zero blocks, row counts that leave a short last group of four, several
//! columns; and the reference itself against ggml's dequantization.

mod common;

use common::*;
use t2p::format::{
    ActBlock, BlockQ2_0g64, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K,
    BlockQ6K, BlockQ8_0, BlockQ8_0x2, BlockQ8_1, BlockQ8K, QuantBlock, dequantize_blocks,
    f16_to_f32, f32_to_f16, vec_dot,
};
use t2p::kernels::{Gemm, QuantKernel};
use t2p::matmul::{ColumnMatrix, QuantMatrix};

/// A block type the tests can fill: random bytes, then finite random scales.
trait TestBlock: QuantKernel {
    fn set_scales(&mut self, rng: &mut Lcg);
}

fn scale(rng: &mut Lcg) -> u16 {
    let v = (rng.next() % 2000) as f32 / 1000.0 - 1.0;
    f32_to_f16(v * 0.05)
}

macro_rules! scales {
    ($($B:ty: $($f:ident),*;)*) => {
        $(impl TestBlock for $B {
            fn set_scales(&mut self, rng: &mut Lcg) {
                $(self.$f = scale(rng);)*
            }
        })*
    };
}
scales!(
    BlockQ4_0: d; BlockQ4_1: d, m; BlockQ5_0: d; BlockQ5_1: d, m; BlockQ8_0: d;
    BlockQ4K: d, dmin; BlockQ5K: d, dmin; BlockQ6K: d; BlockQ2_0g64: d;
);

fn random_blocks<B: TestBlock>(rng: &mut Lcg, n: usize, zero_every: usize) -> Vec<B> {
    (0..n)
        .map(|i| {
            if zero_every > 0 && i % zero_every == 0 {
                return B::zeroed();
            }
            let mut b = B::zeroed();
            for byte in bytemuck::bytes_of_mut(&mut b) {
                *byte = rng.next() as u8;
            }
            b.set_scales(rng);
            b
        })
        .collect()
}

/// Activations: quantized random values, or raw blocks of one extreme value.
#[derive(Clone, Copy, Debug)]
enum Acts {
    Random,
    Extreme(i8),
}

trait TestAct: ActBlock {
    fn constant(q: i8) -> Self;
    fn values(&self) -> Vec<f32>;
}

/// The values of int8 codes under one fp16 scale.
fn fp16_scaled(qs: &[i8], d: u16) -> Vec<f32> {
    qs.iter().map(|&q| q as f32 * f16_to_f32(d)).collect()
}

impl TestAct for BlockQ8_0 {
    fn constant(q: i8) -> Self {
        BlockQ8_0 {
            d: f32_to_f16(0.01),
            qs: [q; 32],
        }
    }
    fn values(&self) -> Vec<f32> {
        fp16_scaled(&self.qs, self.d)
    }
}

impl TestAct for BlockQ8_1 {
    /// The `q8_0` block with its sum.
    fn constant(q: i8) -> Self {
        let BlockQ8_0 { d, qs } = BlockQ8_0::constant(q);
        let s = f32_to_f16(0.01 * 32.0 * q as f32);
        BlockQ8_1 { d, s, qs }
    }
    fn values(&self) -> Vec<f32> {
        fp16_scaled(&self.qs, self.d)
    }
}

impl TestAct for BlockQ8_0x2 {
    fn constant(q: i8) -> Self {
        BlockQ8_0x2 {
            b: [BlockQ8_0::constant(q); 2],
        }
    }
    fn values(&self) -> Vec<f32> {
        self.b.iter().flat_map(|b| b.values()).collect()
    }
}

impl TestAct for BlockQ8K {
    fn constant(q: i8) -> Self {
        BlockQ8K::from_qs([q; 256], 0.01)
    }
    fn values(&self) -> Vec<f32> {
        self.qs.iter().map(|&q| q as f32 * self.d).collect()
    }
}

fn columns<A: TestAct>(rng: &mut Lcg, k: usize, ncols: usize, acts: Acts) -> Vec<A> {
    let n = ncols * k / A::VALUES;
    match acts {
        Acts::Extreme(q) => vec![A::constant(q); n],
        Acts::Random => (0..n)
            .map(|_| {
                let x: Vec<f32> = (0..A::VALUES)
                    .map(|_| (rng.next() % 20001) as f32 / 10000.0 - 1.0)
                    .collect();
                A::quantize(&x)
            })
            .collect(),
    }
}

fn check_type<B: TestBlock>(ks: &[usize])
where
    B::Act: TestAct,
{
    let paths = paths_under_test();
    let mut rng = Lcg(0x5eed ^ B::TYPE.0 as u64);
    for &k in ks {
        for rows in [1, 3, 4, 5, 8, 9] {
            for ncols in [1, 2, 3, 5] {
                for acts in [Acts::Random, Acts::Extreme(-128), Acts::Extreme(127)] {
                    let nb = k / B::WEIGHTS;
                    let w: Vec<B> = random_blocks(&mut rng, rows * nb, 7);
                    let y: Vec<B::Act> = columns(&mut rng, k, ncols, acts);
                    let ld = rows + 2;
                    let mut want = vec![0f32; ncols * ld];
                    for r in 0..rows {
                        for c in 0..ncols {
                            want[c * ld + r] =
                                vec_dot(&w[r * nb..(r + 1) * nb], &y[c * nb..(c + 1) * nb]);
                        }
                    }
                    for kern in &paths {
                        let mut got = vec![0f32; ncols * ld];
                        kern.quant_rows(Gemm {
                            x: &w,
                            nb,
                            y: &y,
                            ncols,
                            out: &mut got,
                            ld,
                        });
                        let what = format!(
                            "{} on {}: rows {rows}, k {k}, {ncols} cols, {acts:?}",
                            B::TYPE,
                            kern.isa()
                        );
                        assert_bits_eq(&got, &want, &what);
                    }
                }
            }
        }
    }
}

/// One test per block type, named after it, each over its inner sizes (multiples of its
/// super-block).
macro_rules! every_path_matches_the_reference {
    ($($name:ident: $B:ty, $ks:expr;)*) => {
        $(
            #[test]
            fn $name() {
                check_type::<$B>(&$ks);
            }
        )*
    };
}
every_path_matches_the_reference!(
    q4_0_every_path_matches_the_reference: BlockQ4_0, [32, 96, 384];
    q4_1_every_path_matches_the_reference: BlockQ4_1, [32, 96, 384];
    q5_0_every_path_matches_the_reference: BlockQ5_0, [32, 96, 384];
    q5_1_every_path_matches_the_reference: BlockQ5_1, [32, 96, 384];
    q8_0_every_path_matches_the_reference: BlockQ8_0, [32, 96, 384];
    q2_0_g64_every_path_matches_the_reference: BlockQ2_0g64, [64, 192, 384];
    q4_k_every_path_matches_the_reference: BlockQ4K, [256, 768];
    q5_k_every_path_matches_the_reference: BlockQ5K, [256, 768];
    q6_k_every_path_matches_the_reference: BlockQ6K, [256, 768];
);

/// The reference's integer sums and fold agree with ggml's dequantization: the dot product of
/// the dequantized weights and activations, in f64, within float rounding.
fn check_against_dequantized<B: TestBlock>()
where
    B::Act: TestAct,
{
    let mut rng = Lcg(77 + B::TYPE.0 as u64);
    for _ in 0..200 {
        let nb = 4;
        let w: Vec<B> = random_blocks(&mut rng, nb, 0);
        let y: Vec<B::Act> = columns(&mut rng, nb * B::WEIGHTS, 1, Acts::Random);
        let mut wf = vec![0f32; nb * B::WEIGHTS];
        dequantize_blocks(&w, &mut wf);
        let yf: Vec<f32> = y.iter().flat_map(|a| a.values()).collect();
        let exact: f64 = wf.iter().zip(&yf).map(|(&a, &b)| a as f64 * b as f64).sum();
        let mag: f64 = wf
            .iter()
            .zip(&yf)
            .map(|(&a, &b)| (a as f64 * b as f64).abs())
            .sum();
        let got = vec_dot(&w, &y) as f64;
        // Q4_1 / Q5_1 take sum(y) from the fp16 `s`, so their error is the fp16 rounding of it.
        let tol = 1e-5 * mag + 2e-3 * mag / (nb * B::WEIGHTS) as f64 + 1e-6;
        assert!(
            (got - exact).abs() <= tol.max(1e-3 * mag),
            "{}: {got} vs {exact} (magnitude {mag})",
            B::TYPE
        );
    }
}

#[test]
fn reference_agrees_with_dequantization() {
    check_against_dequantized::<BlockQ4_0>();
    check_against_dequantized::<BlockQ4_1>();
    check_against_dequantized::<BlockQ5_0>();
    check_against_dequantized::<BlockQ5_1>();
    check_against_dequantized::<BlockQ8_0>();
    check_against_dequantized::<BlockQ4K>();
    check_against_dequantized::<BlockQ5K>();
    check_against_dequantized::<BlockQ6K>();
    check_against_dequantized::<BlockQ2_0g64>();
}

#[test]
fn matrix_quantizes_computes_row_ranges_and_refuses_bad_input() {
    let (rows, k) = (10, 512);
    let mut rng = Lcg(9);
    let w: Vec<BlockQ6K> = random_blocks(&mut rng, rows * k / 256, 0);
    let words: Vec<u16> = bytemuck::cast_slice(bytemuck::cast_slice::<_, u8>(&w)).to_vec();
    let m = QuantMatrix::new(BlockQ6K::TYPE, rows, k, words.clone()).unwrap();
    let x: Vec<f32> = (0..2 * k)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
        .collect();
    let mut work = vec![0u32; m.act_words(2)];
    m.quantize_acts(&x, &mut work).unwrap();
    let kern = t2p::kernels::active();
    let mut all = vec![0f32; 2 * rows];
    m.compute(kern, &work, 2, 0..rows, &mut all, rows).unwrap();
    let mut part = vec![0f32; 2 * 3];
    m.compute(kern, &work, 2, 5..8, &mut part, 3).unwrap();
    assert_bits_eq(&part[..3], &all[5..8], "row range, column 0");
    assert_bits_eq(&part[3..], &all[rows + 5..rows + 8], "row range, column 1");
    // Column 1 equals the reference on its own quantized activations.
    let y: Vec<BlockQ8K> = x[k..]
        .chunks_exact(256)
        .map(<BlockQ8K as ActBlock>::quantize)
        .collect();
    assert_eq!(all[rows + 3].to_bits(), vec_dot(&w[6..8], &y).to_bits());

    assert!(m.compute(kern, &work, 2, 8..11, &mut part, 3).is_err());
    assert!(QuantMatrix::new(BlockQ6K::TYPE, rows, k, words[1..].to_vec()).is_err());
    assert!(QuantMatrix::new(BlockQ6K::TYPE, rows, 300, words.clone()).is_err());
    let mut bad = w.clone();
    bad[3].d = 0x7c00; // +inf
    let bad_words: Vec<u16> = bytemuck::cast_slice(bytemuck::cast_slice::<_, u8>(&bad)).to_vec();
    let e = QuantMatrix::new(BlockQ6K::TYPE, rows, k, bad_words).unwrap_err();
    assert!(e.to_string().contains("non-finite"), "{e}");
}
