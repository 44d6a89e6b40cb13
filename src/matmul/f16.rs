//! A matrix of IEEE half weights held as the file holds them (two bytes a weight, nothing
//! widened at load), multiplied by f32 columns in row chunks ([`crate::kernels::f16`]'s
//! summation order on every path) and read row by row for a token-table lookup.

use std::ops::Range;

use super::ColumnMatrix;
use super::plan::check_row_range;
use crate::error::{Error, Result, check_len};
use crate::format::f16_to_f32;
use crate::kernels::{Gemm, Kernels};

/// A `rows x k` matrix of f16 weights, row after row.
#[derive(Clone, Debug)]
pub struct F16Matrix {
    rows: usize,
    k: usize,
    data: Vec<u16>,
}

impl F16Matrix {
    /// Takes the `rows * k` f16 values of a `rows x k` matrix (`k > 0`).
    pub fn new(rows: usize, k: usize, data: Vec<u16>) -> Result<Self> {
        if k == 0 || rows.checked_mul(k) != Some(data.len()) {
            return Err(Error::Shape(format!(
                "{rows} x {k} F16 needs a positive k and {rows} * {k} values, {} given",
                data.len()
            )));
        }
        Ok(F16Matrix { rows, k, data })
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Inner dimension.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held (and read by a product).
    pub fn size_bytes(&self) -> usize {
        2 * self.data.len()
    }

    /// Writes row `r` as f32 into `out[..k]` (exact: the embedding lookup).
    ///
    /// # Panics
    /// If `r >= rows` or `out` is shorter than `k`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let row = &self.data[r * self.k..(r + 1) * self.k];
        for (o, &h) in out[..self.k].iter_mut().zip(row) {
            *o = f16_to_f32(h);
        }
    }
}

/// Columns of f32 values, column `c` at `c * k`.
impl ColumnMatrix for F16Matrix {
    type Input = f32;
    const INPUT: &'static str = "activation values";

    fn shape(&self) -> (usize, usize) {
        (self.rows, self.k)
    }

    fn input_len(&self, ncols: usize) -> usize {
        ncols * self.k
    }

    fn compute(
        &self,
        kern: &Kernels,
        x: &[f32],
        ncols: usize,
        rows: Range<usize>,
        out: &mut [f32],
        ld: usize,
    ) -> Result<()> {
        check_len(Self::INPUT, self.input_len(ncols), x.len())?;
        if !check_row_range(&rows, self.rows, ncols, ld, out)? {
            return Ok(());
        }
        kern.f16_rows(Gemm {
            x: &self.data[rows.start * self.k..rows.end * self.k],
            nb: self.k,
            y: &x[..ncols * self.k],
            ncols,
            out,
            ld,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::f32_to_f16;
    use crate::kernels::Isa;
    use crate::matmul::{F16Product, RowChunked, run_products};
    use crate::pool::ThreadPool;

    fn matrix(rows: usize, k: usize) -> F16Matrix {
        let data = (0..rows * k)
            .map(|i| f32_to_f16(((i * 7919 % 1000) as f32 - 500.0) / 300.0))
            .collect();
        F16Matrix::new(rows, k, data).unwrap()
    }

    #[test]
    fn shapes_that_disagree_are_refused() {
        assert!(F16Matrix::new(2, 3, vec![0; 5]).is_err());
        assert!(F16Matrix::new(2, 0, vec![]).is_err());
        assert!(F16Matrix::new(usize::MAX, 2, vec![]).is_err());
    }

    #[test]
    fn a_looked_up_row_is_the_exact_widening() {
        let m = matrix(5, 19);
        let mut out = vec![0.0; 20];
        m.dequantize_row(3, &mut out);
        for (j, v) in out[..19].iter().enumerate() {
            assert_eq!(v.to_bits(), f16_to_f32(m.data[3 * 19 + j]).to_bits());
        }
        assert_eq!(out[19], 0.0);
        assert_eq!(m.size_bytes(), 2 * 5 * 19);
    }

    /// Chunked over a pool, the product is the one-call product bit for bit: chunks only
    /// decide which thread computes a row.
    #[test]
    fn pool_chunks_equal_one_call_on_every_path() {
        let pool = ThreadPool::new(3);
        // Big enough to be split (above the chunk rule's minimum), with a last partial row
        // group.
        let (rows, k) = (1027, 2053);
        let m = matrix(rows, k);
        for isa in Isa::available() {
            let kern = Kernels::for_isa(isa).unwrap();
            for ncols in [1, 3, 6] {
                let x: Vec<f32> = (0..ncols * k)
                    .map(|i| (i % 13) as f32 * 0.25 - 1.5)
                    .collect();
                let mut want = vec![0.0; rows * ncols];
                m.compute(kern, &x, ncols, 0..rows, &mut want, rows)
                    .unwrap();
                let p = F16Product::new(&m, &x, ncols).unwrap();
                assert!(p.chunk_count(pool.threads()) > 1);
                let mut got = vec![f32::NAN; rows * ncols];
                run_products(
                    &pool,
                    kern,
                    &mut [(p, &mut got[..])],
                    |p| Ok(Some(*p)),
                    false,
                )
                .unwrap();
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{isa}, {ncols} columns");
            }
        }
    }

    #[test]
    fn a_row_range_past_the_end_is_refused() {
        let m = matrix(4, 16);
        let kern = Kernels::for_isa(Isa::Scalar).unwrap();
        let mut out = vec![0.0; 8];
        assert!(m.compute(kern, &[0.0; 16], 1, 2..5, &mut out, 3).is_err());
        assert!(m.compute(kern, &[0.0; 15], 1, 0..4, &mut out, 4).is_err());
    }
}
