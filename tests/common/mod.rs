//! Shared fixtures for the kernel tests: deterministic random blocks and the comparison helpers.
#![allow(dead_code)]

use t2p::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P, RowPairBlock,
    f32_to_f16,
};
use t2p::kernels::{Gemm, Isa, Kernels};

/// A small deterministic generator (tests must be reproducible under qemu too).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

/// How the weight codes of a test tensor are chosen.
#[derive(Clone, Copy, Debug)]
pub enum Codes {
    /// Uniform over 0..=3, so code 3 (+2) appears.
    Random,
    /// Only the ternary codes 0..=2.
    Ternary,
    /// Every weight has this code.
    Constant(u8),
}

/// How the scales are chosen.
#[derive(Clone, Copy, Debug)]
pub enum Scales {
    /// fp16 1.0 everywhere: outputs equal the exact integer sums.
    One,
    /// Random positive and negative scales, zero included.
    Random,
}

pub fn pq2_0_tensor(
    rows: usize,
    k: usize,
    codes: Codes,
    scales: Scales,
    rng: &mut Lcg,
) -> Vec<BlockPq2_0> {
    (0..rows * k / 128)
        .map(|_| {
            let c = std::array::from_fn(|_| draw_code(codes, rng));
            BlockPq2_0::from_codes(&c, draw_scale(scales, rng))
        })
        .collect()
}

/// One weight code under `codes`.
pub fn draw_code(codes: Codes, rng: &mut Lcg) -> u8 {
    match codes {
        Codes::Random => (rng.next() % 4) as u8,
        Codes::Ternary => (rng.next() % 3) as u8,
        Codes::Constant(u) => u,
    }
}

/// One fp16 weight scale under `scales` (random ones are zero one time in eight).
pub fn draw_scale(scales: Scales, rng: &mut Lcg) -> u16 {
    match scales {
        Scales::One => f32_to_f16(1.0),
        Scales::Random => match rng.next() % 8 {
            0 => 0,
            _ => f32_to_f16((rng.next() % 2001) as f32 / 1000.0 - 1.0),
        },
    }
}

/// How activation values are chosen (raw int8, so -128 and +-127 can be forced).
#[derive(Clone, Copy, Debug)]
pub enum Acts {
    Random,
    Zero,
    Constant(i8),
    /// Alternating +127 / -127.
    Extreme,
    /// Only -128 (legal in the format, never produced by the quantizer).
    Min,
}

/// Raw activation `i` of a block under `acts`.
fn act_value(acts: Acts, i: usize, rng: &mut Lcg) -> i8 {
    match acts {
        Acts::Random => rng.next() as i8,
        Acts::Zero => 0,
        Acts::Constant(v) => v,
        Acts::Extreme => {
            if i.is_multiple_of(2) {
                127
            } else {
                -127
            }
        }
        Acts::Min => -128,
    }
}

/// `ncols` columns of `k / 256` raw q8_K blocks each (column-major), with consistent `bsums`.
pub fn q8k_columns(
    k: usize,
    ncols: usize,
    acts: Acts,
    scale_one: bool,
    rng: &mut Lcg,
) -> Vec<BlockQ8K> {
    (0..ncols * k / 256)
        .map(|_| {
            let qs = std::array::from_fn(|i| act_value(acts, i, rng));
            let d = if scale_one {
                1.0
            } else {
                (rng.next() % 1000) as f32 / 997.0 + 0.001
            };
            BlockQ8K::from_qs(qs, d)
        })
        .collect()
}

/// `ncols` columns of `k / 128` raw `q8_0` blocks each (column-major), with consistent sums and
/// a random scale per 32 values (zero included) unless `scale_one`.
pub fn q8_0_columns(
    k: usize,
    ncols: usize,
    acts: Acts,
    scale_one: bool,
    rng: &mut Lcg,
) -> Vec<BlockQ8_0Quad> {
    (0..ncols * k / 128)
        .map(|_| {
            let qs = std::array::from_fn(|i| act_value(acts, i, rng));
            let d = std::array::from_fn(|_| match (scale_one, rng.next() % 8) {
                (true, _) => 1.0,
                (false, 0) => 0.0,
                (false, _) => (rng.next() % 1000) as f32 / 997.0 + 0.001,
            });
            BlockQ8_0Quad::from_qs(qs, d)
        })
        .collect()
}

/// Every path this CPU runs except the oracle itself, with a check that the expected paths are
/// there: `T2P_EXPECT_ISAS=scalar,avx2` (set by test.sh for each CPU model) makes a run whose
/// CPU silently lacks a path fail instead of passing on the oracle alone.
pub fn paths_under_test() -> Vec<&'static Kernels> {
    let available = Isa::available();
    if let Ok(expect) = std::env::var("T2P_EXPECT_ISAS") {
        let names: Vec<&str> = available.iter().map(|i| i.name()).collect();
        assert_eq!(
            names.join(","),
            expect,
            "ISA paths available on this CPU differ from T2P_EXPECT_ISAS"
        );
    }
    eprintln!("kernel paths under test: {:?}", available);
    available
        .into_iter()
        .map(|isa| Kernels::for_isa(isa).unwrap())
        .collect()
}

pub fn oracle() -> &'static Kernels {
    Kernels::for_isa(Isa::Scalar).unwrap()
}

/// Bitwise equality of two float slices, with the first difference in the message.
pub fn assert_bits_eq(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: index {i}: got {g:e}, oracle {w:e}"
        );
    }
}

/// Where a test product writes: `ncols` columns `ld` apart, of which the first `rows` are
/// outputs; everything starts as `sentinel`, so a test sees what a kernel wrote and what it left
/// alone.
#[derive(Clone, Copy, Debug)]
pub struct Written {
    pub rows: usize,
    pub ncols: usize,
    pub ld: usize,
    pub sentinel: f32,
}

impl Written {
    fn buffer(&self) -> Vec<f32> {
        vec![self.sentinel; self.ld * self.ncols]
    }

    /// Blocks per row group of `w`, whose row groups give the `rows` outputs.
    fn nb<B>(&self, w: &[B]) -> usize {
        w.len() * ROWS_PER_T2P / self.rows
    }

    /// The `q8_0` product as the driver calls it: the gemv for one column, the gemm for more.
    pub fn q8_0<B: RowPairBlock>(&self, kern: &Kernels, w: &[B], y: &[BlockQ8_0Quad]) -> Vec<f32> {
        if self.ncols > 1 {
            return self.gemm_q8_0(kern, w, y);
        }
        let mut out = self.buffer();
        kern.gemv_q8_0(w, self.nb(w), y, &mut out[..self.rows]);
        out
    }

    /// The `q8_0` gemm, for any column count.
    pub fn gemm_q8_0<B: RowPairBlock>(
        &self,
        kern: &Kernels,
        w: &[B],
        y: &[BlockQ8_0Quad],
    ) -> Vec<f32> {
        let (nb, ncols, ld) = (self.nb(w), self.ncols, self.ld);
        let mut out = self.buffer();
        kern.gemm_q8_0(Gemm {
            x: w,
            nb,
            y,
            ncols,
            out: &mut out,
            ld,
        });
        out
    }

    /// The `q8_K` product: the gemv of `col` for one column, the gemm of the `tiles` for more
    /// (`None`: the gemm whatever the count).
    pub fn q8k(
        &self,
        kern: &Kernels,
        w: &[BlockT2p],
        col: Option<&[BlockQ8K]>,
        tiles: &[BlockQ8Kx4],
    ) -> Vec<f32> {
        let (nb, ncols, ld) = (self.nb(w), self.ncols, self.ld);
        let mut out = self.buffer();
        match col {
            Some(col) if ncols == 1 => kern.gemv(w, nb, col, &mut out[..self.rows]),
            _ => kern.gemm(Gemm {
                x: w,
                nb,
                y: tiles,
                ncols,
                out: &mut out,
                ld,
            }),
        }
        out
    }
}
