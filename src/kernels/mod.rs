//! Kernels per ISA path and the dispatch seam that picks one.
//!
//! Every path implements the same operations on whole blocks:
//!
//! * **gemv** (decode): T2P row groups x one `q8_K` column -> `f32` per row;
//! * **gemm** (prefill): T2P row groups x `q8_K x4` tiles of four columns;
//! * **gemv_q8_0 / gemm_q8_0**: the same with `q8_0` activations (a scale per 32 values,
//!   llama.cpp's numerics for `pq2_0`): four exact 32-weight sums per block, each scaled by its
//!   own activation scale;
//! * **stock vec_dot**: `pq2_0` (file layout) x `q8_K`, the baseline the T2P layout is measured
//!   against.
//!
//! All paths are exact: integer sums per 128-weight block are exact, and every path converts and
//! accumulates them in the same float order as the scalar oracle ([`scalar`]), namely
//! `acc = acc + (d_w * d_y) * (isum as f32)` per block (q8_K) or
//! `acc = acc + d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3)` (q8_0; with a scale per 64 weights,
//! the group-64 T2P block of mainline's Q2_0, `(acc + d_w0 * (d0*i0 + d1*i1)) + d_w1 * (d2*i2 +
//! d3*i3)`: `fold_q8_0`), in block order, without fused multiply-add. So outputs are bit-identical across paths, which the tests assert.
//!
//! The best path is chosen once ([`active`]); `T2P_ISA=scalar|avx2|avx-vnni|avx512-vnni|amx|neon|neon-dotprod|neon-i8mm`
//! or [`set_active`] force another one (tests use [`Kernels::for_isa`] directly).

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result};
use crate::format::{
    BlockPq2_0, BlockQ8_0Quad, BlockQ8K, BlockQ8Kx4, BlockT2p, BlockT2pG64, ROWS_PER_T2P,
    RowPairBlock, T2pSlice,
};

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod act;
pub mod attention;
pub mod cpu;
pub mod delta;
pub mod exp;
mod f16;
pub mod fwht;
mod paths;
mod quant;
pub mod scalar;
pub use act::silu_mul;
pub use paths::{attention_path_name, f16_path_name, quant_path_name};
pub use quant::QuantKernel;
#[cfg(target_arch = "x86_64")]
mod x86_64;

/// Blocks per row a per-thread operand buffer ([`with_per_call_buffer`]) holds from its first
/// use (k = 32768), so which thread first meets which matrix does not decide when a buffer grows.
#[cfg_attr(
    not(any(target_arch = "aarch64", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) const PER_CALL_MIN_BLOCKS: usize = 256;

/// A kernel's per-call operand buffer: one per thread and layout, declared next to the kernel as
/// `thread_local! { static BUF: Cell<Vec<T>> = const { Cell::new(Vec::new()) }; }` (the pattern
/// of the x86 kernels' buffers, e.g. `x86_64::q8k`'s `TILE_OPS`).
#[cfg_attr(
    not(any(target_arch = "aarch64", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) type PerCallBuffer<T> = std::thread::LocalKey<std::cell::Cell<Vec<T>>>;

/// Runs `f` on `items` collected into this thread's buffer `buf`, whose allocation (at least
/// `min` items) is reused from call to call: a decode calls the kernels hundreds of times per
/// token, and a forward pass must not allocate after its first one. The buffer is taken out of
/// its cell for the call and put back after, so a nested call (none today) would only make its
/// own, and a panic in between only loses it.
#[cfg_attr(
    not(any(target_arch = "aarch64", target_arch = "x86_64")),
    allow(dead_code)
)]
pub(crate) fn with_per_call_buffer<T: 'static, R>(
    buf: &'static PerCallBuffer<T>,
    min: usize,
    items: impl IntoIterator<Item = T>,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    let mut v = buf.take();
    v.clear();
    v.reserve(min); // `clear` kept the capacity: allocates only on a first or larger call
    v.extend(items);
    let r = f(&v);
    buf.set(v);
    r
}

/// An instruction-set path. The numbers are stable (they are the C ABI's `T2pIsa`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable integer loops; the oracle. Runs everywhere.
    Scalar = 0,
    /// x86_64 AVX2 + F16C (`maddubs` on slot-masked words).
    Avx2 = 1,
    /// aarch64 NEON without the dot-product extension.
    Neon = 2,
    /// aarch64 NEON + dotprod (SDOT for gemv and SDOT tiles of 4 columns for gemm).
    NeonDotprod = 3,
    /// aarch64 NEON + dotprod + i8mm (SMMLA gemm tiles).
    NeonI8mm = 4,
    /// x86_64 AVX2 + F16C + AVX-VNNI (`vpdpbusd`, VEX: no int16 saturation).
    AvxVnni = 5,
    /// x86_64 AVX2 + F16C + AVX-512 F/BW/VL/VNNI (`vpdpbusd`, EVEX).
    Avx512Vnni = 6,
    /// x86_64 AVX-512 VNNI + AMX-TILE/INT8 (`tdpbusd` tiles for gemms of 16+ columns), where
    /// Linux grants the process the tile state.
    Amx = 7,
}

impl Isa {
    /// Every path, in the order of preference within its architecture (best last).
    pub const ALL: [Isa; 8] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512Vnni,
        Isa::Amx,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::NeonI8mm,
    ];

    /// The name used by `T2P_ISA` and printed by tools.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avx-vnni",
            Isa::Avx512Vnni => "avx512-vnni",
            Isa::Amx => "amx",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon-dotprod",
            Isa::NeonI8mm => "neon-i8mm",
        }
    }

    /// Parses a name as printed by [`Isa::name`].
    pub fn from_name(name: &str) -> Result<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == name.trim())
            .ok_or_else(|| Error::InvalidArgument(format!("unknown ISA {name:?} (expected one of scalar, avx2, avx-vnni, avx512-vnni, amx, neon, neon-dotprod, neon-i8mm)")))
    }

    /// The ISA with the given stable number.
    pub fn from_u32(v: u32) -> Result<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| *isa as u32 == v)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown ISA number {v}")))
    }

    /// The CPU features ([`cpu`] bits) the path needs: every kernel of its table (T2P, ggml
    /// block types, F16 rows, attention) is compiled for them. The x86 paths ask for FMA, which
    /// their F16 rows use and every AVX2 CPU has.
    pub fn required_features(self) -> u32 {
        let x86 = cpu::AVX2 | cpu::F16C | cpu::FMA;
        match self {
            Isa::Scalar => 0,
            Isa::Avx2 => x86,
            Isa::AvxVnni => x86 | cpu::AVX_VNNI,
            Isa::Avx512Vnni => x86 | cpu::AVX512F | cpu::AVX512_VNNI,
            Isa::Amx => x86 | cpu::AVX512F | cpu::AVX512_VNNI | cpu::AMX,
            Isa::Neon => cpu::NEON,
            Isa::NeonDotprod => cpu::NEON | cpu::DOTPROD,
            Isa::NeonI8mm => cpu::NEON | cpu::DOTPROD | cpu::I8MM,
        }
    }

    /// Whether this CPU (and this build's target) can run the path: the one place that asks
    /// the CPU ([`cpu::features`]).
    pub fn is_supported(self) -> bool {
        let need = self.required_features();
        paths::table(self).is_some() && cpu::features() & need == need
    }

    /// The best path this CPU supports.
    pub fn best() -> Isa {
        *Isa::available().last().expect("scalar is always available")
    }

    /// Every path this CPU supports, scalar first.
    pub fn available() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|isa| isa.is_supported())
            .collect()
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `x`: `ng * nb` T2P blocks (row groups), `y`: `nb / 2` `q8_K` blocks, `out`: `4 * ng` values.
pub(crate) type GemvFn = fn(x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]);
/// `x` as for gemv, `y`: `ceil(ncols / 4) * nb / 2` `q8_K x4` blocks (tile-major, the last tile
/// zero-padded), `out[c * ld + r]` for column `c < ncols` and row `r < 4 * ng`.
pub(crate) type GemmFn = fn(Gemm<'_, BlockT2p, BlockQ8Kx4>);
/// `x` as for gemv (either T2P layout), `y`: the `nb` `q8_0` blocks of one column, `out`:
/// `4 * ng` values.
pub(crate) type GemvQ8_0Fn<B = BlockT2p> =
    fn(x: &[B], nb: usize, y: &[BlockQ8_0Quad], out: &mut [f32]);
/// `x` as for gemv, `y`: `ncols * nb` `q8_0` blocks (column `c` at `c * nb`), `out[c * ld + r]`.
pub(crate) type GemmQ8_0Fn<B = BlockT2p> = fn(Gemm<'_, B, BlockQ8_0Quad>);
/// `x`: `n / 128` pq2_0 blocks, `y`: `n / 256` `q8_K` blocks.
pub(crate) type VecDotFn = fn(x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32;

/// The operands of one gemm: `x` holds the weights (`nb` blocks per row group, or per row for
/// the ggml block types), `y` the activations of `ncols` columns in the layout the entry takes,
/// and column `c` of the result goes to `out[c * ld..][..rows]`. Named fields, so a caller
/// cannot swap `ncols` and `ld`; the checked entries ([`Kernels::gemm`], [`Kernels::gemm_q8_0`],
/// [`Kernels::quant_rows`]) validate the shapes before a kernel sees them.
#[derive(Debug)]
pub struct Gemm<'a, W, A> {
    /// The weight blocks, row group (or row) after row group.
    pub x: &'a [W],
    /// Blocks per row group (or row).
    pub nb: usize,
    /// The activations of the `ncols` columns.
    pub y: &'a [A],
    /// Columns to compute.
    pub ncols: usize,
    /// The result, column `c` at `c * ld`.
    pub out: &'a mut [f32],
    /// Distance between two columns of `out`, at least the row count.
    pub ld: usize,
}

/// [`Gemm::into_parts`]: `(x, nb, y, ncols, out, ld)`.
pub(crate) type GemmParts<'a, W, A> = (&'a [W], usize, &'a [A], usize, &'a mut [f32], usize);

impl<'a, W, A> Gemm<'a, W, A> {
    /// The same output and shape over other weight and activation slices (views of them, or
    /// a kernel's own layout of the activations).
    fn with<'b, V, B>(self, x: &'b [V], y: &'b [B]) -> Gemm<'b, V, B>
    where
        'a: 'b,
    {
        Gemm {
            x,
            nb: self.nb,
            y,
            ncols: self.ncols,
            out: self.out,
            ld: self.ld,
        }
    }

    /// The same operands with the weights seen as another block type (a layout's view of them).
    pub(crate) fn with_weights<V>(self, x: &'a [V]) -> Gemm<'a, V, A> {
        let y = self.y;
        self.with(x, y)
    }

    /// The same weights and output with the activations in another layout (a kernel's own).
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    pub(crate) fn with_activations<'b, V>(self, y: &'b [V]) -> Gemm<'b, W, V>
    where
        'a: 'b,
    {
        let x = self.x;
        self.with(x, y)
    }

    /// The operands as a tuple `(x, nb, y, ncols, out, ld)`, for kernels that index them
    /// directly.
    pub(crate) fn into_parts(self) -> GemmParts<'a, W, A> {
        (self.x, self.nb, self.y, self.ncols, self.out, self.ld)
    }

    /// Column `c`'s first `rows` outputs.
    pub(crate) fn column(&mut self, c: usize, rows: usize) -> &mut [f32] {
        &mut self.out[c * self.ld..c * self.ld + rows]
    }

    /// Panics unless `x` is whole row groups of `nb` blocks and `out` holds `ncols` columns of
    /// the `rows` that `rows_per_group` rows a group give.
    fn assert_shape(&self, rows_per_group: usize) -> usize {
        assert!(self.nb > 0, "nb must be positive");
        assert_eq!(self.x.len() % self.nb, 0, "weight blocks");
        let rows = self.x.len() / self.nb * rows_per_group;
        assert!(self.ld >= rows, "ld smaller than the rows");
        if self.ncols > 0 {
            assert!(
                self.out.len() >= (self.ncols - 1) * self.ld + rows,
                "output too short"
            );
        }
        rows
    }
}

/// The T2P kernels of one ISA path: one part of its [`Kernels`].
pub(crate) struct T2pKernels {
    /// The path these are compiled for (checked against the table they are put in).
    isa: Isa,
    gemv: GemvFn,
    gemm: GemmFn,
    gemv_q8_0: GemvQ8_0Fn,
    gemm_q8_0: GemmQ8_0Fn,
    gemv_q8_0_g64: GemvQ8_0Fn<BlockT2pG64>,
    gemm_q8_0_g64: GemmQ8_0Fn<BlockT2pG64>,
    gemm_unit: GemmQ8_0Fn,
    vec_dot_stock: VecDotFn,
}

impl T2pKernels {
    /// The table of a path whose `q8_0` kernels are generic over the T2P layout (the scalar and
    /// aarch64 paths): each pair is one generic pair taken at [`BlockT2p`] and at
    /// [`BlockT2pG64`]. The unit-scale gemm is the `q8_0` gemm, which gives the same bits when
    /// every scale is 1.0; the x86 paths, with a gemm of their own, build theirs with a `const fn`
    /// over their `Path`.
    pub(crate) const fn portable(
        isa: Isa,
        (gemv, gemm): (GemvFn, GemmFn),
        (gemv_q8_0, gemm_q8_0): (GemvQ8_0Fn, GemmQ8_0Fn),
        (gemv_q8_0_g64, gemm_q8_0_g64): (GemvQ8_0Fn<BlockT2pG64>, GemmQ8_0Fn<BlockT2pG64>),
        vec_dot_stock: VecDotFn,
    ) -> Self {
        T2pKernels {
            isa,
            gemv,
            gemm,
            gemv_q8_0,
            gemm_q8_0,
            gemv_q8_0_g64,
            gemm_q8_0_g64,
            gemm_unit: gemm_q8_0,
            vec_dot_stock,
        }
    }
}

/// The `q8_0` float fold of one T2P block and row, written once for every path over its own
/// vector type `V` (`f32` for the oracle): `p_j = d_j * i_j` are the scaled 32-weight sums,
/// passed as `[p0 + p1, p2, p3]` (the first sum is the same in both layouts, so a kernel may
/// form it before it decodes the block's second half), and `dw(h)` the row scales of half `h`.
/// With one scale per row (`halves == 1`, pq2_0) the result is
/// `acc + dw(0) * (((p0 + p1) + p2) + p3)`, llama.cpp's order for pq2_0; with a scale per 64
/// weights (`halves == 2`, Q2_0) it is `(acc + dw(0) * (p0 + p1)) + dw(1) * (p2 + p3)`,
/// `ggml_vec_dot_q2_0_q8_0`'s. `add` and `mul` must be single separately rounded operations
/// (never a fused multiply-add), which is what makes every path bit-identical to the oracle.
#[inline(always)]
pub(crate) fn fold_q8_0<V: Copy>(
    halves: usize,
    acc: V,
    [s01, p2, p3]: [V; 3],
    dw: impl Fn(usize) -> V,
    add: impl Fn(V, V) -> V,
    mul: impl Fn(V, V) -> V,
) -> V {
    if halves == 1 {
        add(acc, mul(dw(0), add(add(s01, p2), p3)))
    } else {
        add(add(acc, mul(dw(0), s01)), mul(dw(1), add(p2, p3)))
    }
}

/// A constant `[[T; INNER]; OUTER]` lookup table with entry `[i][j] = $entry` (an expression of
/// `i` and `j`), built at compile time: `const fn` cannot call a closure yet, so the loops are
/// written out here once instead of in each table of shuffle indices.
macro_rules! const_table {
    ([[$t:ty; $inner:expr]; $outer:expr], |$i:ident, $j:ident| $entry:expr) => {{
        let mut table = [[0 as $t; $inner]; $outer];
        let mut $i = 0;
        while $i < $outer {
            let mut $j = 0;
            while $j < $inner {
                table[$i][$j] = $entry;
                $j += 1;
            }
            $i += 1;
        }
        table
    }};
}
pub(crate) use const_table;

/// The kernels of one ISA path, all of them: T2P, ggml block types, F16 rows and attention
/// (`paths.rs` composes them). Only obtainable for paths the CPU supports, so calling them is
/// always sound.
pub struct Kernels {
    isa: Isa,
    t2p: &'static T2pKernels,
    quant: &'static quant::QuantKernels,
    f16: f16::F16Kernel,
    attention: attention::AttentionKernels,
    act: act::ActKernels,
}

impl Kernels {
    /// The kernels of `isa`, or [`Error::UnsupportedIsa`] if this CPU cannot run it.
    pub fn for_isa(isa: Isa) -> Result<&'static Kernels> {
        paths::table(isa)
            .filter(|_| isa.is_supported())
            .ok_or_else(|| Error::UnsupportedIsa(format!("{isa} cannot run on this CPU or target")))
    }

    /// Which path these are.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// gemv over whole row groups: `x` holds `out.len() / 4` row groups of `nb` blocks each,
    /// `y` the `nb / 2` activation blocks; writes one value per row.
    ///
    /// # Panics
    /// If the slice lengths do not match that shape (the [`crate::matmul`] driver checks first).
    pub fn gemv(&self, x: &[BlockT2p], nb: usize, y: &[BlockQ8K], out: &mut [f32]) {
        assert_gemv_shape(x, nb, y.len(), out.len());
        (self.t2p.gemv)(x, nb, y, out)
    }

    /// gemm over whole row groups and `ncols` columns held in `ceil(ncols / 4)` tiles of
    /// `nb / 2` `q8_K x4` blocks; writes `out[c * ld + r]`.
    ///
    /// # Panics
    /// If the slice lengths do not match that shape.
    pub fn gemm(&self, g: Gemm<'_, BlockT2p, BlockQ8Kx4>) {
        assert!(
            g.nb.is_multiple_of(2),
            "nb must be a positive even block count"
        );
        g.assert_shape(ROWS_PER_T2P);
        assert_eq!(
            g.y.len(),
            g.ncols.div_ceil(4) * g.nb / 2,
            "activation tiles"
        );
        (self.t2p.gemm)(g)
    }

    /// gemv with `q8_0` activations (llama.cpp's numerics for `pq2_0` and Q2_0): `x` holds
    /// `out.len() / 4` row groups of `nb` blocks of either T2P layout, `y` the `nb` activation
    /// blocks of the column. Each output is `sum_b d_w * (((d0*i0 + d1*i1) + d2*i2) + d3*i3)`
    /// over the exact 32-weight sums `i_j` (with a scale per 64 weights, the two halves are
    /// scaled and added in turn: `fold_q8_0`), bit-identical on every path.
    ///
    /// # Panics
    /// If the slice lengths do not match that shape.
    pub fn gemv_q8_0<B: RowPairBlock>(
        &self,
        x: &[B],
        nb: usize,
        y: &[BlockQ8_0Quad],
        out: &mut [f32],
    ) {
        assert!(nb > 0, "nb must be positive");
        assert_eq!(y.len(), nb, "activation blocks");
        assert_eq!(out.len() % ROWS_PER_T2P, 0, "rows");
        assert_eq!(x.len(), out.len() / ROWS_PER_T2P * nb, "weight blocks");
        match B::slice(x) {
            T2pSlice::G128(x) => (self.t2p.gemv_q8_0)(x, nb, y, out),
            T2pSlice::G64(x) => (self.t2p.gemv_q8_0_g64)(x, nb, y, out),
        }
    }

    /// gemm with `q8_0` activations: column `c` is `y[c * nb .. (c + 1) * nb]`; writes
    /// `out[c * ld + r]`, each column bit-identical to [`Kernels::gemv_q8_0`] on it.
    ///
    /// # Panics
    /// If the slice lengths do not match that shape.
    pub fn gemm_q8_0<B: RowPairBlock>(&self, g: Gemm<'_, B, BlockQ8_0Quad>) {
        g.assert_shape(ROWS_PER_T2P);
        assert_eq!(g.y.len(), g.ncols * g.nb, "activation blocks");
        if g.ncols > 0 {
            match B::slice(g.x) {
                T2pSlice::G128(x) => (self.t2p.gemm_q8_0)(g.with_weights(x)),
                T2pSlice::G64(x) => (self.t2p.gemm_q8_0_g64)(g.with_weights(x)),
            }
        }
    }

    /// gemm of unit-scale blocks (BitNet's: every weight and activation block scale 1.0, the
    /// per-vector scales applied after): `out[c * ld + r]` is the exact integer sum
    /// `sum (u - 1) * q` of row `r` and column `c` as f32. That is what [`Kernels::gemm_q8_0`]
    /// returns for such blocks, since every float step of its fold is exact on integers below
    /// 2^24 (`k` under 65536); a path may sum in integers and skip the fold, or run
    /// [`Kernels::gemm_q8_0`]. Blocks of other scales give unspecified values.
    ///
    /// # Panics
    /// If the slice lengths do not match that shape.
    pub fn gemm_unit(&self, g: Gemm<'_, BlockT2p, BlockQ8_0Quad>) {
        g.assert_shape(ROWS_PER_T2P);
        assert_eq!(g.y.len(), g.ncols * g.nb, "activation blocks");
        if g.ncols > 0 {
            (self.t2p.gemm_unit)(g)
        }
    }

    /// Whether a T2P gemm of `ncols` columns decodes each weight once for all of them (the AMX
    /// tiles), so that a caller should cut it by rows, not by columns.
    pub fn gemm_decodes_once(&self, ncols: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.isa == Isa::Amx {
            return ncols >= x86_64::AMX_MIN_COLUMNS;
        }
        let _ = ncols;
        false
    }

    /// The stock-layout dot product of one pq2_0 row with one `q8_K` column.
    ///
    /// # Panics
    /// If `x.len() != 2 * y.len()`.
    pub fn vec_dot_stock(&self, x: &[BlockPq2_0], y: &[BlockQ8K]) -> f32 {
        assert_eq!(x.len(), 2 * y.len(), "one q8_K block per two pq2_0 blocks");
        (self.t2p.vec_dot_stock)(x, y)
    }
}

fn assert_gemv_shape(x: &[BlockT2p], nb: usize, ny: usize, nout: usize) {
    assert!(
        nb > 0 && nb.is_multiple_of(2),
        "nb must be a positive even block count"
    );
    assert_eq!(ny, nb / 2, "activation blocks");
    assert_eq!(nout % ROWS_PER_T2P, 0, "rows");
    assert_eq!(x.len(), nout / ROWS_PER_T2P * nb, "weight blocks");
}

const UNSET: u8 = u8::MAX;
static ACTIVE: AtomicU8 = AtomicU8::new(UNSET);

/// The kernels in use: chosen once (the best supported path, or `T2P_ISA` if it names a
/// supported one; an invalid `T2P_ISA` is reported on stderr and ignored).
pub fn active() -> &'static Kernels {
    let cur = ACTIVE.load(Ordering::Acquire);
    let isa = if cur == UNSET {
        let chosen = isa_from_env().unwrap_or_else(Isa::best);
        // A concurrent set_active wins over the default choice.
        match ACTIVE.compare_exchange(UNSET, chosen as u8, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => chosen,
            Err(other) => Isa::from_u32(other as u32).unwrap_or(Isa::Scalar),
        }
    } else {
        Isa::from_u32(cur as u32).unwrap_or(Isa::Scalar)
    };
    Kernels::for_isa(isa)
        .or_else(|_| Kernels::for_isa(Isa::Scalar))
        .expect("the scalar path runs everywhere")
}

fn isa_from_env() -> Option<Isa> {
    let value = std::env::var("T2P_ISA").ok()?;
    match Isa::from_name(&value).and_then(|isa| Kernels::for_isa(isa).map(|k| k.isa())) {
        Ok(isa) => Some(isa),
        Err(e) => {
            eprintln!(
                "t2p: ignoring T2P_ISA={value:?}: {e}; using {}",
                Isa::best()
            );
            None
        }
    }
}

/// Forces the path [`active`] returns from now on; fails if this CPU cannot run it.
pub fn set_active(isa: Isa) -> Result<()> {
    Kernels::for_isa(isa)?;
    ACTIVE.store(isa as u8, Ordering::Release);
    Ok(())
}
