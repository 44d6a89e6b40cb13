//! The two inner loops of attention over an f16 KV cache: the scores `q . k[p]` of one query head
//! against every cached position, and the weighted sum of the cached V rows. Both read the halves
//! directly, and every path evaluates the same f32 expression in the same order, so they agree
//! bit for bit: a dot product is [`dot`]'s (eight lane sums, added lane 0 first, then the
//! leftover products), and `out[d]` sums `w[p] * v[p][d]` over `p` in increasing order.
//!
//! A slice of rows is addressed as `rows[p * stride..p * stride + width]`.

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::super::ops::dot;

/// The instruction set the loops run on: the one the matmul kernels run on
/// ([`Isa::for_kernels`]), so `T2P_ISA` and the C ABI's choice hold for attention too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Halves converted a row at a time by `half`, then plain f32 loops (vectorised by the
    /// compiler; NEON on aarch64).
    Portable,
    /// AVX2 with F16C: `vcvtph2ps` converts eight halves in a register.
    #[cfg(target_arch = "x86_64")]
    Avx2F16c,
    /// AVX-512F: sixteen halves a register; the scores keep two rows' eight-lane sums in one
    /// register, so every lane adds what the AVX2 lane adds, in the same order.
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Isa {
    /// The loops for the kernels' path `isa`: every x86 SIMD path has AVX2 and F16C (the
    /// kernels' dispatch checked them), the others run the portable loops.
    pub fn for_kernels(isa: crate::kernels::Isa) -> Isa {
        match isa {
            #[cfg(target_arch = "x86_64")]
            crate::kernels::Isa::Avx2 | crate::kernels::Isa::AvxVnni => Isa::Avx2F16c,
            #[cfg(target_arch = "x86_64")]
            crate::kernels::Isa::Avx512Vnni => Isa::Avx512,
            _ => Isa::Portable,
        }
    }

    /// Every path this CPU runs (for tests that compare them).
    #[cfg(test)]
    pub fn available() -> Vec<Isa> {
        let mut v: Vec<Isa> = crate::kernels::Isa::available()
            .into_iter()
            .map(Isa::for_kernels)
            .collect();
        v.dedup();
        v
    }

    /// `out[p] = dot(q, k[p]) * scale` for `p < out.len()`, each row `q.len()` wide.
    ///
    /// # Panics
    /// If `k` is too short for `out.len()` rows of `stride`.
    pub fn scores(self, q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
        check_rows(k, out.len(), stride, q.len());
        match self {
            Isa::Portable => scores_portable(q, k, stride, scale, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: only x86 kernel paths map here, and the dispatch offers those only on
            // CPUs with AVX2 and F16C; the rows were bounds-checked above.
            Isa::Avx2F16c => unsafe { x86::scores(q, k, stride, scale, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: only the avx512-vnni kernel path maps here, which the dispatch offers
            // only with AVX-512F (and AVX2, F16C); the rows were bounds-checked above.
            Isa::Avx512 => unsafe { x86::scores_zmm(q, k, stride, scale, out) },
        }
    }

    /// `out[d] = sum_p w[p] * v[p][d]` for `d < out.len()`, `p < w.len()`.
    ///
    /// # Panics
    /// If `v` is too short for `w.len()` rows of `stride`.
    pub fn weighted_sum(self, w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
        check_rows(v, w.len(), stride, out.len());
        match self {
            Isa::Portable => weighted_sum_portable(w, v, stride, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `scores`: the CPU has AVX2 and F16C, the rows are in bounds.
            Isa::Avx2F16c => unsafe { x86::weighted_sum(w, v, stride, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `scores`: the CPU has AVX-512F, AVX2 and F16C, the rows are in bounds.
            Isa::Avx512 => unsafe { x86::weighted_sum_zmm(w, v, stride, out) },
        }
    }
}

/// [`Isa::scores`] over f32 rows (an f32 cache): [`dot`] per row, on any CPU.
///
/// # Panics
/// If `k` is too short for `out.len()` rows of `stride`.
pub fn scores_f32(q: &[f32], k: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    check_rows(k, out.len(), stride, q.len());
    for (p, s) in out.iter_mut().enumerate() {
        *s = dot(q, &k[p * stride..p * stride + q.len()]) * scale;
    }
}

/// [`Isa::weighted_sum`] over f32 rows (an f32 cache), `p` in increasing order.
///
/// # Panics
/// If `v` is too short for `w.len()` rows of `stride`.
pub fn weighted_sum_f32(w: &[f32], v: &[f32], stride: usize, out: &mut [f32]) {
    check_rows(v, w.len(), stride, out.len());
    out.fill(0.0);
    for (p, &wp) in w.iter().enumerate() {
        for (o, &x) in out.iter_mut().zip(&v[p * stride..]) {
            *o += wp * x;
        }
    }
}

fn check_rows<T>(rows: &[T], n: usize, stride: usize, width: usize) {
    assert!(
        n == 0 || (n - 1) * stride + width <= rows.len(),
        "KV rows out of bounds"
    );
}

fn scores_portable(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
    let mut row = ROW.take();
    row.clear();
    row.reserve(q.len().max(MIN_ROW));
    row.resize(q.len(), 0.0);
    for (p, s) in out.iter_mut().enumerate() {
        k[p * stride..p * stride + q.len()].convert_to_f32_slice(&mut row);
        *s = dot(q, &row) * scale;
    }
    ROW.set(row);
}

fn weighted_sum_portable(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
    let mut row = ROW.take();
    row.clear();
    row.reserve(out.len().max(MIN_ROW));
    row.resize(out.len(), 0.0);
    out.fill(0.0);
    for (p, &wp) in w.iter().enumerate() {
        v[p * stride..p * stride + out.len()].convert_to_f32_slice(&mut row);
        for (o, &x) in out.iter_mut().zip(&row) {
            *o += wp * x;
        }
    }
    ROW.set(row);
}

/// Values the row buffer holds from its first use (every head width in use is at most this).
const MIN_ROW: usize = 512;

thread_local! {
    /// One K or V row converted to f32, per thread, for the portable loops (allocated once).
    static ROW: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use half::f16;
    use std::arch::x86_64::*;

    /// What the shared loops (`scores_pass!`, `weighted_sum_pass!`) need of AVX2's
    /// registers: eight lanes, one K row per scores register.
    mod ymm {
        use half::f16;
        use std::arch::x86_64::{__m256, _mm_loadu_si128, _mm256_cvtph_ps};
        // `q8`: eight query values, unaligned, as the register's row needs them.
        pub use std::arch::x86_64::{
            _mm256_add_ps as add, _mm256_loadu_ps as q8, _mm256_mul_ps as mul,
            _mm256_set1_ps as set1, _mm256_setzero_ps as zero, _mm256_storeu_ps as store,
        };

        /// f32 lanes of a register.
        pub const LANES: usize = 8;
        /// K rows one scores register sums.
        pub const ROWS: usize = 1;

        /// Eight halves of the register's row from `p`, widened.
        ///
        /// # Safety
        /// `p..p + 8` must be readable.
        #[inline]
        #[target_feature(enable = "avx2,f16c")]
        pub unsafe fn rows8(p: *const f16, _stride: usize) -> __m256 {
            // SAFETY: as the caller guarantees.
            unsafe { load(p) }
        }

        /// `LANES` halves from `p`, widened.
        ///
        /// # Safety
        /// `p..p + 8` must be readable.
        #[inline]
        #[target_feature(enable = "avx2,f16c")]
        pub unsafe fn load(p: *const f16) -> __m256 {
            // SAFETY: the caller guarantees eight readable halves; `loadu` needs no alignment.
            _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
        }

        /// The eight lane sums of each of the register's rows.
        #[inline]
        #[target_feature(enable = "avx2,f16c")]
        pub fn sums(a: __m256) -> [__m256; ROWS] {
            [a]
        }
    }

    /// What the shared loops need of AVX-512's registers: sixteen lanes; a scores register
    /// holds the eight lane sums of one row in its low half and of the next in its high half.
    mod zmm {
        use half::f16;
        use std::arch::x86_64::*;
        pub use std::arch::x86_64::{
            _mm512_add_ps as add, _mm512_mul_ps as mul, _mm512_set1_ps as set1,
            _mm512_setzero_ps as zero, _mm512_storeu_ps as store,
        };

        /// f32 lanes of a register.
        pub const LANES: usize = 16;
        /// K rows one scores register sums.
        pub const ROWS: usize = 2;

        /// Eight query values from `p` in both 256-bit halves.
        ///
        /// # Safety
        /// `p..p + 8` must be readable.
        #[inline]
        #[target_feature(enable = "avx512f,avx2,f16c")]
        pub unsafe fn q8(p: *const f32) -> __m512 {
            // SAFETY: the caller guarantees eight readable values; `loadu` needs no alignment.
            let d = _mm256_castps_pd(unsafe { _mm256_loadu_ps(p) });
            _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(d), d, 1))
        }

        /// Eight halves of row `p` in the low lanes and eight of row `p + stride` in the high
        /// lanes, widened.
        ///
        /// # Safety
        /// `p..p + 8` and `p + stride..p + stride + 8` must be readable.
        #[inline]
        #[target_feature(enable = "avx512f,avx2,f16c")]
        pub unsafe fn rows8(p: *const f16, stride: usize) -> __m512 {
            // SAFETY: the caller guarantees eight readable halves at each; no alignment needed.
            let (lo, hi) = unsafe {
                (
                    _mm_loadu_si128(p.cast()),
                    _mm_loadu_si128(p.add(stride).cast()),
                )
            };
            _mm512_cvtph_ps(_mm256_set_m128i(hi, lo))
        }

        /// `LANES` halves from `p`, widened.
        ///
        /// # Safety
        /// `p..p + 16` must be readable.
        #[inline]
        #[target_feature(enable = "avx512f,avx2,f16c")]
        pub unsafe fn load(p: *const f16) -> __m512 {
            // SAFETY: the caller guarantees sixteen readable halves; no alignment needed.
            _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) })
        }

        /// The eight lane sums of each of the register's rows (low half, then high half).
        #[inline]
        #[target_feature(enable = "avx512f,avx2,f16c")]
        pub fn sums(a: __m512) -> [__m256; ROWS] {
            let hi = _mm512_extractf64x4_pd(_mm512_castps_pd(a), 1);
            [_mm512_castps512_ps256(a), _mm256_castpd_ps(hi)]
        }
    }

    /// The lanes of `acc` added in [`super::dot`]'s order, plus the leftover products.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn finish(acc: __m256, q_tail: &[f32], k_tail: &[f16]) -> f32 {
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds eight f32.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
        let tail: f32 = q_tail.iter().zip(k_tail).map(|(x, y)| x * y.to_f32()).sum();
        lanes.iter().sum::<f32>() + tail
    }

    /// The scores of positions `$p..` in passes of `$n` registers of `$r` (`$n * $r::ROWS`
    /// positions, one independent sum each in flight) while a pass fits, `$p` left after the
    /// last; every position's lanes add the same products in the same order whatever `$r`
    /// and `$n`. Inside an `unsafe fn` whose caller guarantees the rows are in bounds.
    macro_rules! scores_pass {
        ($r:ident * $n:literal, $p:ident: $q:ident, $k:ident, $stride:ident, $scale:ident, $out:ident) => {
            let hd = $q.len();
            let body = hd / 8 * 8;
            while $p + $n * $r::ROWS <= $out.len() {
                let mut acc = [$r::zero(); $n];
                let mut i = 0;
                while i < body {
                    // SAFETY: `i + 8 <= hd`, so q and the pass's rows (in bounds by the
                    // caller's guarantee) have eight values at `i`.
                    unsafe {
                        let qv = $r::q8($q.as_ptr().add(i));
                        for (r, a) in acc.iter_mut().enumerate() {
                            let row = $k.as_ptr().add(($p + $r::ROWS * r) * $stride + i);
                            *a = $r::add(*a, $r::mul(qv, $r::rows8(row, $stride)));
                        }
                    }
                    i += 8;
                }
                for (r, a) in acc.into_iter().enumerate() {
                    for (h, lanes) in $r::sums(a).into_iter().enumerate() {
                        let at = $p + $r::ROWS * r + h;
                        let row = at * $stride;
                        $out[at] = finish(lanes, &$q[body..], &$k[row + body..row + hd]) * $scale;
                    }
                }
                $p += $n * $r::ROWS;
            }
        };
    }

    /// `$out[$d..]` of the weighted sum in passes of `$n` registers of `$r` (`$n * $r::LANES`
    /// outputs over all the rows) while a pass fits, `$d` left after the last; every output
    /// adds the same products in the same order whatever `$r` and `$n`. Inside an
    /// `unsafe fn` whose caller guarantees the rows are in bounds.
    macro_rules! weighted_sum_pass {
        ($r:ident * $n:literal, $d:ident: $w:ident, $v:ident, $stride:ident, $out:ident) => {
            while $d + $n * $r::LANES <= $out.len() {
                let mut acc = [$r::zero(); $n];
                for (p, &wp) in $w.iter().enumerate() {
                    let wv = $r::set1(wp);
                    for (j, a) in acc.iter_mut().enumerate() {
                        let at = p * $stride + $d + $r::LANES * j;
                        // SAFETY: `d + LANES * (j + 1) <= hd`, inside row `p`.
                        let x = unsafe { $r::load($v.as_ptr().add(at)) };
                        *a = $r::add(*a, $r::mul(wv, x));
                    }
                }
                for (j, a) in acc.into_iter().enumerate() {
                    // SAFETY: `out[d + LANES * j..d + LANES * (j + 1)]` is in bounds.
                    unsafe { $r::store($out.as_mut_ptr().add($d + $r::LANES * j), a) };
                }
                $d += $n * $r::LANES;
            }
        };
    }

    /// See [`super::Isa::scores`]: four positions per pass, four independent sums in flight
    /// (one sum alone would wait on the add latency), then the rest one at a time.
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C, and `k` holds `out.len()` rows of `stride` (`q.len()` wide).
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn scores(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
        let mut p = 0;
        scores_pass!(ymm * 4, p: q, k, stride, scale, out);
        scores_pass!(ymm * 1, p: q, k, stride, scale, out);
    }

    /// [`scores`] eight positions per pass: register `r` holds the eight lane sums of rows
    /// `p + 2r` (low half) and `p + 2r + 1` (high half), each lane adding exactly the products
    /// [`scores`]' lane adds; the rest of the rows go to [`scores`].
    ///
    /// # Safety
    /// The CPU has AVX-512F, AVX2 and F16C, and `k` holds `out.len()` rows of `stride`.
    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub unsafe fn scores_zmm(q: &[f32], k: &[f16], stride: usize, scale: f32, out: &mut [f32]) {
        let mut p = 0;
        scores_pass!(zmm * 4, p: q, k, stride, scale, out);
        if p < out.len() {
            // SAFETY: the rows from `p` on are in bounds as the caller guaranteed; the CPU
            // has AVX2 and F16C.
            unsafe { scores(q, &k[p * stride..], stride, scale, &mut out[p..]) }
        }
    }

    /// [`weighted_sum`] 128 outputs per pass in eight registers (each output adds the same
    /// products in the same order); the rest of the outputs go to [`weighted_sum`].
    ///
    /// # Safety
    /// The CPU has AVX-512F, AVX2 and F16C, and `v` holds `w.len()` rows of `stride`.
    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub unsafe fn weighted_sum_zmm(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
        let mut d = 0;
        weighted_sum_pass!(zmm * 8, d: w, v, stride, out);
        if d < out.len() {
            // SAFETY: the columns from `d` on are inside every row; the CPU has AVX2, F16C.
            unsafe { weighted_sum(w, &v[d..], stride, &mut out[d..]) }
        }
    }

    /// See [`super::Isa::weighted_sum`]: 64 outputs per pass over the rows stay in eight
    /// registers, then 8 at a time, then the leftovers one by one.
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C, and `v` holds `w.len()` rows of `stride` (`out.len()` wide).
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn weighted_sum(w: &[f32], v: &[f16], stride: usize, out: &mut [f32]) {
        let mut d = 0;
        weighted_sum_pass!(ymm * 8, d: w, v, stride, out);
        weighted_sum_pass!(ymm * 1, d: w, v, stride, out);
        for (dd, o) in out.iter_mut().enumerate().skip(d) {
            let mut s = 0.0f32;
            for (p, &wp) in w.iter().enumerate() {
                s += wp * v[p * stride + dd].to_f32();
            }
            *o = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Halves over the whole range that matters (subnormals to thousands, both signs).
    fn halves(n: usize, seed: u64) -> Vec<f16> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mag = ((x >> 8) % 1000) as f32 / 100.0 - 6.0; // 1e-6 .. 1e4
                let sign = if x & 1 == 0 { 1.0 } else { -1.0 };
                f16::from_f32(sign * 10f32.powf(mag) * ((x >> 20) % 997) as f32 / 997.0)
            })
            .collect()
    }

    fn floats(n: usize, seed: u64) -> Vec<f32> {
        halves(n, seed)
            .iter()
            .enumerate()
            .map(|(i, h)| h.to_f32() * (1.0 + i as f32 * 1e-3))
            .collect()
    }

    /// Every path gives the portable path's bits, for head widths with and without leftovers
    /// and position counts on and off the four-row blocks.
    #[test]
    fn every_path_matches_the_portable_one_bit_for_bit() {
        let paths = Isa::available();
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c") {
            assert!(
                paths.contains(&Isa::Avx2F16c),
                "the AVX2+F16C path must be tested here"
            );
        }
        #[cfg(target_arch = "x86_64")]
        if crate::kernels::Isa::available().contains(&crate::kernels::Isa::Avx512Vnni) {
            assert!(
                paths.contains(&Isa::Avx512),
                "the AVX-512 path must be tested here"
            );
        }
        for (hd, extra) in [
            (1, 0),
            (7, 3),
            (8, 0),
            (13, 5),
            (64, 0),
            (72, 8),
            (128, 128),
            (136, 8),
            (200, 1),
            (256, 0),
        ] {
            let stride = hd + extra;
            for len in [1, 3, 4, 5, 8, 9, 16, 17, 33] {
                let seed = (hd * 1000 + len) as u64;
                let q = floats(hd, seed);
                let k = halves(len * stride, seed + 1);
                let w = floats(len, seed + 2);
                let (mut s0, mut o0) = (vec![0.0; len], vec![1.0; hd]);
                Isa::Portable.scores(&q, &k, stride, 0.125, &mut s0);
                Isa::Portable.weighted_sum(&w, &k, stride, &mut o0);
                // The portable path is the f32 expression of the cache's values.
                let row: Vec<f32> = k[..hd].iter().map(|h| h.to_f32()).collect();
                assert_eq!(s0[0].to_bits(), (dot(&q, &row) * 0.125).to_bits());
                for isa in &paths[1..] {
                    let (mut s, mut o) = (vec![0.0; len], vec![-1.0; hd]);
                    isa.scores(&q, &k, stride, 0.125, &mut s);
                    isa.weighted_sum(&w, &k, stride, &mut o);
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&s), bits(&s0), "{isa:?} scores hd {hd} len {len}");
                    assert_eq!(bits(&o), bits(&o0), "{isa:?} sum hd {hd} len {len}");
                }
            }
        }
    }

    #[test]
    fn weighted_sum_of_one_hot_weights_is_the_row() {
        let v = halves(3 * 16, 9);
        for isa in Isa::available() {
            let mut o = vec![0.0; 16];
            isa.weighted_sum(&[0.0, 1.0, 0.0], &v, 16, &mut o);
            assert!(o.iter().zip(&v[16..32]).all(|(a, b)| *a == b.to_f32()));
        }
    }

    /// The f32-cache loops are the portable f16 loops' expression: on values an f16 holds
    /// exactly they give the same bits.
    #[test]
    fn f32_rows_give_the_portable_bits() {
        for (hd, stride, len) in [(7, 10, 3), (64, 64, 17), (136, 144, 5)] {
            let seed = (hd * 31 + len) as u64;
            let q = floats(hd, seed);
            let k = halves(len * stride, seed + 1);
            let k32: Vec<f32> = k.iter().map(|h| h.to_f32()).collect();
            let w = floats(len, seed + 2);
            let (mut s0, mut o0) = (vec![0.0; len], vec![1.0; hd]);
            Isa::Portable.scores(&q, &k, stride, 0.125, &mut s0);
            Isa::Portable.weighted_sum(&w, &k, stride, &mut o0);
            let (mut s, mut o) = (vec![0.0; len], vec![-1.0; hd]);
            scores_f32(&q, &k32, stride, 0.125, &mut s);
            weighted_sum_f32(&w, &k32, stride, &mut o);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&s), bits(&s0), "scores hd {hd} len {len}");
            assert_eq!(bits(&o), bits(&o0), "sum hd {hd} len {len}");
        }
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn short_rows_are_refused() {
        Isa::Portable.scores(&[1.0; 8], &[f16::ZERO; 15], 8, 1.0, &mut [0.0; 2]);
    }
}
