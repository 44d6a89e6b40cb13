//! Shared fixtures for the kernel tests: deterministic random blocks and the comparison helpers.
#![allow(dead_code)]

use t2p::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, ROWS_PER_T2P, RowPairBlock,
    TernaryBlock, f32_to_f16, repack_pq2_0_to_t2p, t2p_block_count,
};
use t2p::kernels::{Gemm, Isa, Kernels};
use t2p::matmul::{MatmulPlan, QuantizedBatch, T2pMatrix};

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

/// `rows x k` weights of ternary format `B` (row-major, `k / B::WEIGHTS` blocks per row), each
/// block's codes then its one scale drawn under `codes` and `scales`.
pub fn ternary_tensor<B: TernaryBlock>(
    rows: usize,
    k: usize,
    codes: Codes,
    scales: Scales,
    rng: &mut Lcg,
) -> Vec<B> {
    draw_blocks(
        rows * k / B::WEIGHTS,
        B::WEIGHTS,
        rng,
        |_, rng| draw_code(codes, rng),
        |c, rng| B::encode(c, &[draw_scale(scales, rng)]).unwrap(),
    )
}

/// `n` blocks, each built by `block` from `len` values drawn by `value` (given the value's index
/// in the block) and then from whatever else it draws, in that order.
fn draw_blocks<V, T>(
    n: usize,
    len: usize,
    rng: &mut Lcg,
    mut value: impl FnMut(usize, &mut Lcg) -> V,
    mut block: impl FnMut(&[V], &mut Lcg) -> T,
) -> Vec<T> {
    (0..n)
        .map(|_| {
            let values: Vec<V> = (0..len).map(|i| value(i, rng)).collect();
            block(&values, rng)
        })
        .collect()
}

/// `pq` (`rows x k` pq2_0 blocks) repacked into T2P row groups.
pub fn repacked_pq2_0(pq: &[BlockPq2_0], rows: usize, k: usize) -> Vec<BlockT2p> {
    let mut w = vec![BlockT2p::default(); t2p_block_count(rows, k).unwrap()];
    repack_pq2_0_to_t2p(pq, rows, k, &mut w).unwrap();
    w
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

/// An activation block the tests build from raw int8 values and drawn scales.
pub trait TestActs: Sized {
    /// Values per block.
    const VALUES: usize;
    /// The block of `qs` (`VALUES` long) with consistent sums and scales drawn from `rng`
    /// (1.0 if `scale_one`).
    fn with_drawn_scales(qs: &[i8], scale_one: bool, rng: &mut Lcg) -> Self;
}

/// A random positive activation scale.
fn act_scale(rng: &mut Lcg) -> f32 {
    (rng.next() % 1000) as f32 / 997.0 + 0.001
}

impl TestActs for BlockQ8K {
    const VALUES: usize = 256;
    fn with_drawn_scales(qs: &[i8], scale_one: bool, rng: &mut Lcg) -> Self {
        let d = if scale_one { 1.0 } else { act_scale(rng) };
        BlockQ8K::from_qs(qs.try_into().unwrap(), d)
    }
}

/// A random scale per 32 values, zero one time in eight.
impl TestActs for BlockQ8_0Quad {
    const VALUES: usize = 128;
    fn with_drawn_scales(qs: &[i8], scale_one: bool, rng: &mut Lcg) -> Self {
        let d = std::array::from_fn(|_| match (scale_one, rng.next() % 8) {
            (true, _) => 1.0,
            (false, 0) => 0.0,
            (false, _) => act_scale(rng),
        });
        BlockQ8_0Quad::from_qs(qs.try_into().unwrap(), d)
    }
}

/// `ncols` columns of `k / A::VALUES` raw activation blocks each (column-major).
pub fn act_columns<A: TestActs>(
    k: usize,
    ncols: usize,
    acts: Acts,
    scale_one: bool,
    rng: &mut Lcg,
) -> Vec<A> {
    draw_blocks(
        ncols * k / A::VALUES,
        A::VALUES,
        rng,
        |i, rng| act_value(acts, i, rng),
        |qs, rng| A::with_drawn_scales(qs, scale_one, rng),
    )
}

/// Calls `check(rows, k, ncols, codes, scales, acts, seed)` with random codes, scales and
/// activations for every shape, columns outermost, the seed one past `seed` for the first shape
/// and one more for each next.
pub fn sweep_random_shapes(
    mut seed: u64,
    ncols: &[usize],
    rows: &[usize],
    ks: &[usize],
    mut check: impl FnMut(usize, usize, usize, Codes, Scales, Acts, u64),
) {
    for &n in ncols {
        for &r in rows {
            for &k in ks {
                seed += 1;
                check(r, k, n, Codes::Random, Scales::Random, Acts::Random, seed);
            }
        }
    }
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

/// Asserts that `run` gives `want` bit for bit on every path under test; `what` names the case
/// in the message, after the path.
pub fn assert_every_path(want: &[f32], what: &str, run: impl Fn(&Kernels) -> Vec<f32>) {
    for kern in paths_under_test() {
        assert_bits_eq(&run(kern), want, &format!("{} {what}", kern.isa()));
    }
}

/// `w` times the columns of `batch` as a C thread computes it: `plan`'s rows in three chunks,
/// each through [`MatmulPlan::compute_columns`], into `out[c * rows + r]`.
pub fn compute_in_chunks(kern: &Kernels, w: &T2pMatrix, batch: &QuantizedBatch) -> Vec<f32> {
    let plan = MatmulPlan::for_batch(w, batch).unwrap();
    compute_plan_in_chunks(kern, plan, w, batch)
}

/// [`compute_in_chunks`] on a given plan of `w` and `batch`.
#[allow(dead_code)]
pub fn compute_plan_in_chunks(
    kern: &Kernels,
    plan: MatmulPlan,
    w: &T2pMatrix,
    batch: &QuantizedBatch,
) -> Vec<f32> {
    let rows = w.rows();
    let mut out = vec![f32::NAN; rows * batch.ncols()];
    let n = 3;
    for i in 0..n {
        let r = plan.chunk_rows(i, n);
        let mut scratch = Vec::new();
        let put = |c: usize, v: &[f32]| {
            out[c * rows + r.start..c * rows + r.end].copy_from_slice(v);
        };
        plan.compute_columns(kern, w.blocks(), batch.work(), r.clone(), &mut scratch, put)
            .unwrap();
    }
    out
}

/// The scalar oracle every other path must match.
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
    /// `ncols` columns of `rows` outputs, each followed by `gap` slots no product may write.
    pub fn with_gap(rows: usize, ncols: usize, gap: usize, sentinel: f32) -> Self {
        Written {
            rows,
            ncols,
            ld: rows + gap,
            sentinel,
        }
    }

    /// A fresh output buffer, all sentinel.
    pub fn buffer(&self) -> Vec<f32> {
        vec![self.sentinel; self.ld * self.ncols]
    }

    /// Column `c` of `out`, its gap included.
    pub fn column<'a>(&self, out: &'a [f32], c: usize) -> &'a [f32] {
        &out[c * self.ld..(c + 1) * self.ld]
    }

    fn is_sentinel(&self, v: &f32) -> bool {
        v.to_bits() == self.sentinel.to_bits()
    }

    /// Asserts that nothing past the `rows` outputs of any column of `out` was written.
    pub fn assert_untouched(&self, out: &[f32]) {
        for c in 0..self.ncols {
            let gap = &self.column(out, c)[self.rows..];
            assert!(gap.iter().all(|v| self.is_sentinel(v)), "gap of column {c}");
        }
    }

    /// Asserts that every one of the `rows` outputs of every column of `out` was written.
    pub fn assert_all_written(&self, out: &[f32]) {
        for c in 0..self.ncols {
            let real = &self.column(out, c)[..self.rows];
            assert!(!real.iter().any(|v| self.is_sentinel(v)), "column {c}");
        }
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
