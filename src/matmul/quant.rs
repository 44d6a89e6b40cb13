//! A matrix in one of ggml's standard block types ([`QuantBlock`]), held in the file's own bytes
//! (nothing is dequantized at load), with its activation quantization and row-range products:
//! the driver the runner uses for LM heads, token tables and fallback matrices.

use std::ops::Range;

use bytemuck::Zeroable;

use super::ColumnMatrix;
use super::plan::check_row_range;
use crate::error::{Error, Result, check_len};
use crate::format::{ActBlock, GgmlType, QuantBlock, quantize_act, with_block_type};
use crate::kernels::{Gemm, Kernels};

/// A `rows x k` matrix of ggml blocks in file order (row `r`'s blocks at `r * k / WEIGHTS`).
#[derive(Clone, Debug)]
pub struct QuantMatrix {
    ty: GgmlType,
    rows: usize,
    k: usize,
    /// The blocks' bytes; `u16` words because every block holds fp16 fields (2-byte aligned).
    data: Vec<u16>,
}

impl QuantMatrix {
    /// The bytes `rows x k` weights of type `ty` take, or an error naming why it cannot hold them.
    pub fn bytes_for(ty: GgmlType, rows: usize, k: usize) -> Result<usize> {
        let (w, b) = ty
            .block()
            .filter(|_| ty.is_quant())
            .ok_or_else(|| Error::InvalidArgument(format!("{ty} is not a ggml block type here")))?;
        let (w, b) = (w as usize, b as usize);
        if k == 0 || !k.is_multiple_of(w) {
            return Err(Error::Shape(format!(
                "row length {k} is not a positive multiple of {w} (the {ty} block)"
            )));
        }
        (k / w)
            .checked_mul(b)
            .and_then(|row| row.checked_mul(rows))
            .ok_or_else(|| Error::Shape(format!("{rows} x {k} {ty} does not fit in memory")))
    }

    /// Takes the blocks of a `rows x k` matrix of type `ty` (`data`, as `u16` words, exactly
    /// [`QuantMatrix::bytes_for`] long). Refused: a type that is not a ggml block type, a `k` the
    /// block does not divide, a length that disagrees, non-finite scales.
    pub fn new(ty: GgmlType, rows: usize, k: usize, data: Vec<u16>) -> Result<Self> {
        let bytes = Self::bytes_for(ty, rows, k)?;
        if 2 * data.len() != bytes {
            return Err(Error::Shape(format!(
                "{rows} x {k} {ty} takes {bytes} bytes, {} given",
                2 * data.len()
            )));
        }
        let m = QuantMatrix { ty, rows, k, data };
        with_block_type!(quant ty, B => m.check_scales::<B>()?, _ => unreachable!("checked above"));
        Ok(m)
    }

    fn check_scales<B: QuantBlock>(&self) -> Result<()> {
        let nb = self.k / B::WEIGHTS;
        match self.blocks::<B>().iter().position(|b| !b.scales_finite()) {
            None => Ok(()),
            Some(i) => Err(Error::InvalidArgument(format!(
                "{} block {} of row {} has a non-finite scale",
                self.ty,
                i % nb,
                i / nb
            ))),
        }
    }

    fn blocks<B: QuantBlock>(&self) -> &[B] {
        bytemuck::cast_slice(bytemuck::cast_slice::<u16, u8>(&self.data))
    }

    /// The block type.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// The type the activations are quantized to (ggml's `vec_dot_type`).
    pub fn act_type(&self) -> GgmlType {
        self.ty.vec_dot_type()
    }

    /// The zeroed words of a `rows x k` matrix of `ty`, for [`QuantMatrix::new`] (tests and
    /// benchmarks that fill the bytes themselves).
    pub fn zeroed_words(ty: GgmlType, rows: usize, k: usize) -> Result<Vec<u16>> {
        Ok(vec![u16::zeroed(); Self::bytes_for(ty, rows, k)? / 2])
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held (the file's bytes).
    pub fn size_bytes(&self) -> usize {
        2 * self.data.len()
    }

    /// Writes row `r` as f32 into `out[..k]` (ggml's dequantization: the embedding lookup).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `k`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        with_block_type!(quant self.ty, B => {
            let nb = self.k / <B as QuantBlock>::WEIGHTS;
            crate::format::dequantize_blocks(&self.blocks::<B>()[r * nb..(r + 1) * nb], &mut out[..self.k]);
        }, _ => unreachable!("a QuantMatrix holds a ggml block type"))
    }

    /// `u32` words of scratch [`quantize_acts`](Self::quantize_acts) needs for `ncols` columns.
    pub fn act_words(&self, ncols: usize) -> usize {
        with_block_type!(quant self.ty, B => {
            let blocks = ncols * self.k / <<B as QuantBlock>::Act as ActBlock>::VALUES;
            (blocks * size_of::<<B as QuantBlock>::Act>()).div_ceil(4)
        }, _ => unreachable!("a QuantMatrix holds a ggml block type"))
    }

    /// Quantizes `x` (`ncols` columns of `k`, column after column) into `work` as this matrix's
    /// activation type, exactly as ggml's CPU quantizer.
    pub fn quantize_acts(&self, x: &[f32], work: &mut [u32]) -> Result<()> {
        if !x.len().is_multiple_of(self.k) {
            return Err(Error::Shape(format!(
                "{} values are not whole columns of {}",
                x.len(),
                self.k
            )));
        }
        let ncols = x.len() / self.k;
        check_len("activation words", self.act_words(ncols), work.len())?;
        with_block_type!(quant self.ty, B => {
            quantize_act(x, act_blocks_mut::<<B as QuantBlock>::Act>(work, x.len() / <<B as QuantBlock>::Act as ActBlock>::VALUES));
        }, _ => unreachable!("a QuantMatrix holds a ggml block type"));
        Ok(())
    }
}

/// Columns [`quantize_acts`](QuantMatrix::quantize_acts) wrote into activation words.
impl ColumnMatrix for QuantMatrix {
    type Input = u32;
    const INPUT: &'static str = "activation words";

    fn shape(&self) -> (usize, usize) {
        (self.rows, self.k)
    }

    fn input_len(&self, ncols: usize) -> usize {
        self.act_words(ncols)
    }

    fn compute(
        &self,
        kern: &Kernels,
        work: &[u32],
        ncols: usize,
        rows: Range<usize>,
        out: &mut [f32],
        ld: usize,
    ) -> Result<()> {
        check_len(Self::INPUT, self.input_len(ncols), work.len())?;
        if !check_row_range(&rows, self.rows, ncols, ld, out)? {
            return Ok(());
        }
        with_block_type!(quant self.ty, B => {
                let nb = self.k / B::WEIGHTS;
                let y = act_blocks::<<B as QuantBlock>::Act>(work, ncols * nb);
                let x = &self.blocks::<B>()[rows.start * nb..rows.end * nb];
                kern.quant_rows(Gemm { x, nb, y, ncols, out, ld })
            },
            _ => unreachable!("a QuantMatrix holds a ggml block type"));
        Ok(())
    }
}

fn act_blocks<A: ActBlock>(work: &[u32], n: usize) -> &[A] {
    let bytes: &[u8] = bytemuck::cast_slice(work);
    bytemuck::cast_slice(&bytes[..n * size_of::<A>()])
}

fn act_blocks_mut<A: ActBlock>(work: &mut [u32], n: usize) -> &mut [A] {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(work);
    bytemuck::cast_slice_mut(&mut bytes[..n * size_of::<A>()])
}
