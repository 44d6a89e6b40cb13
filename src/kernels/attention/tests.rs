use super::*;
use crate::kernels::Isa;
use crate::test_rng::XorShift;

/// The reference's table.
fn reference() -> &'static Kernels {
    Kernels::for_isa(Isa::Scalar).unwrap()
}

/// The table of every path this CPU runs with its own attention loops, the reference first.
fn paths() -> Vec<&'static Kernels> {
    let mut paths: Vec<&'static Kernels> = Isa::available()
        .into_iter()
        .map(|isa| Kernels::for_isa(isa).unwrap())
        .collect();
    paths.dedup_by_key(|k| k.attention.path);
    paths
}

/// Halves over the whole range that matters (subnormals to thousands, both signs).
fn halves(n: usize, seed: u64) -> Vec<f16> {
    let mut rng = XorShift::new(seed);
    (0..n)
        .map(|_| {
            let x = rng.next();
            let mag = ((x >> 8) % 1000) as f32 / 100.0 - 6.0; // 1e-6 .. 1e4
            let sign = if x & 1 == 0 { 1.0 } else { -1.0 };
            f16::from_f32(sign * 10f32.powf(mag) * ((x >> 20) % 997) as f32 / 997.0)
        })
        .collect()
}

/// The bit patterns of `v`, for comparing results bit for bit (NaNs included).
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
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
    let paths = paths();
    let tested = |isa: Isa, name: &str| {
        !isa.is_supported() || paths.iter().any(|k| k.attention.path == name)
    };
    assert!(
        tested(Isa::Avx2, "avx2"),
        "the AVX2+F16C path must be tested here"
    );
    assert!(
        tested(Isa::Avx512Vnni, "avx512"),
        "the AVX-512 path must be tested here"
    );
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
        for len in [1, 3, 4, 5, 8, 9, 16, 17, 33, 1100] {
            let seed = (hd * 1000 + len) as u64;
            let q = floats(hd, seed);
            let k = halves(len * stride, seed + 1);
            let w = floats(len, seed + 2);
            let (mut s0, mut o0) = (vec![0.0; len], vec![1.0; hd]);
            reference().attention_scores(&q, 1, &k, stride, 0.125, &mut s0);
            reference().attention_weighted_sum(&w, 1, &k, stride, &mut o0);
            // The portable path is the f32 expression of the cache's values.
            let row: Vec<f32> = k[..hd].iter().map(|h| h.to_f32()).collect();
            assert_eq!(s0[0].to_bits(), (dot(&q, &row) * 0.125).to_bits());
            for kern in &paths[1..] {
                let (mut s, mut o) = (vec![0.0; len], vec![-1.0; hd]);
                kern.attention_scores(&q, 1, &k, stride, 0.125, &mut s);
                kern.attention_weighted_sum(&w, 1, &k, stride, &mut o);
                let isa = kern.isa();
                assert_eq!(bits(&s), bits(&s0), "{isa} scores hd {hd} len {len}");
                assert_eq!(bits(&o), bits(&o0), "{isa} sum hd {hd} len {len}");
            }
        }
    }
}

/// Several query heads sharing the rows (grouped-query attention: 2, 3, 4 and 8 heads per KV
/// head) give, on every path, each head's single-head bits from the reference: the grouped
/// loops read each row once and change no sum.
#[test]
fn grouped_heads_equal_each_head_alone_on_every_path() {
    let paths = paths();
    for heads in [2, 3, 4, 8] {
        for (hd, extra) in [(8, 0), (13, 5), (64, 64), (128, 0), (136, 8), (512, 16)] {
            let stride = hd + extra;
            // 1100: past the x86 loops' prefetch and row-block threshold, not a whole block.
            for len in [1, 3, 7, 8, 9, 17, 40, 1100] {
                let seed = (heads * 100_000 + hd * 1000 + len) as u64;
                let q = floats(heads * hd, seed);
                let k = halves(len * stride, seed + 1);
                let w = floats(heads * len, seed + 2);
                let (mut s0, mut o0) = (vec![0.0; heads * len], vec![0.0; heads * hd]);
                for g in 0..heads {
                    let (qg, wg) = (&q[g * hd..(g + 1) * hd], &w[g * len..(g + 1) * len]);
                    let sg = &mut s0[g * len..(g + 1) * len];
                    reference().attention_scores(qg, 1, &k, stride, 0.125, sg);
                    let og = &mut o0[g * hd..(g + 1) * hd];
                    reference().attention_weighted_sum(wg, 1, &k, stride, og);
                }
                for kern in &paths {
                    let (mut s, mut o) = (vec![1.0; heads * len], vec![-1.0; heads * hd]);
                    kern.attention_scores(&q, heads, &k, stride, 0.125, &mut s);
                    kern.attention_weighted_sum(&w, heads, &k, stride, &mut o);
                    let what = format!("{} heads {heads} hd {hd} len {len}", kern.isa());
                    assert_eq!(bits(&s), bits(&s0), "scores {what}");
                    assert_eq!(bits(&o), bits(&o0), "sums {what}");
                }
            }
        }
    }
}

/// Asserts that every path panics on both entries over `cache` f16 values in rows of 8: the
/// scores of `q` query values in `q_heads` heads into `n_scores` outputs, and the weighted sum
/// of two weights in `w_heads` heads into 8 outputs.
fn every_path_refuses(cache: usize, q: usize, q_heads: usize, n_scores: usize, w_heads: usize) {
    let (k, q) = (vec![f16::ZERO; cache], vec![1.0; q]);
    for kern in paths() {
        let scores = std::panic::catch_unwind(|| {
            kern.attention_scores(&q, q_heads, &k, 8, 1.0, &mut vec![0.0; n_scores])
        });
        assert!(scores.is_err(), "{} scores", kern.isa());
        let sum = std::panic::catch_unwind(|| {
            kern.attention_weighted_sum(&[1.0; 2], w_heads, &k, 8, &mut [0.0; 8])
        });
        assert!(sum.is_err(), "{} weighted sum", kern.isa());
    }
}

#[test]
fn heads_that_do_not_divide_are_refused() {
    // 3 scores for 2 query heads; weights in 0 heads.
    every_path_refuses(64, 12, 2, 3, 0);
}

/// A weighted sum over no positions is zero on every path, for one and several heads.
#[test]
fn weighted_sum_of_no_rows_is_zero() {
    for kern in paths() {
        for (heads, hd) in [(1, 128), (2, 128), (4, 64), (3, 13)] {
            let mut out = vec![f32::NAN; heads * hd];
            kern.attention_weighted_sum(&[], heads, &[], hd, &mut out);
            assert!(
                out.iter().all(|&x| x.to_bits() == 0),
                "{} {heads}x{hd}",
                kern.isa()
            );
        }
    }
}

#[test]
fn weighted_sum_of_one_hot_weights_is_the_row() {
    let v = halves(3 * 16, 9);
    for kern in paths() {
        let mut o = vec![0.0; 16];
        kern.attention_weighted_sum(&[0.0, 1.0, 0.0], 1, &v, 16, &mut o);
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
        reference().attention_scores(&q, 1, &k, stride, 0.125, &mut s0);
        reference().attention_weighted_sum(&w, 1, &k, stride, &mut o0);
        let (mut s, mut o) = (vec![0.0; len], vec![-1.0; hd]);
        scores_f32(&q, &k32, stride, 0.125, &mut s);
        weighted_sum_f32(&w, &k32, stride, &mut o);
        assert_eq!(bits(&s), bits(&s0), "scores hd {hd} len {len}");
        assert_eq!(bits(&o), bits(&o0), "sum hd {hd} len {len}");
    }
}

#[test]
#[should_panic(expected = "out of bounds")]
fn short_rows_are_refused() {
    reference().attention_scores(&[1.0; 8], 1, &[f16::ZERO; 15], 8, 1.0, &mut [0.0; 2]);
}

/// Every path's entries refuse rows out of bounds before they read.
#[test]
fn every_path_refuses_short_rows() {
    // Two rows of 8 (2 scores, 2 weights) in 15 values.
    every_path_refuses(15, 8, 1, 2, 1);
}

/// Every path's softmax gives the reference's bits: lengths on and off the sixteen lanes,
/// masked (`-inf`, `-1e9`) and tied values, spreads past [`crate::kernels::exp::EXP_MIN`], huge and tiny scores.
#[test]
fn every_path_softmax_matches_the_reference_bit_for_bit() {
    let mut rows: Vec<Vec<f32>> = Vec::new();
    for len in (0..=40).chain([63, 64, 65, 255, 1000, 4097]) {
        let f = floats(len, len as u64 + 77);
        rows.push(f.iter().map(|v| v * 1e-3).collect()); // a spread of a few units
        rows.push(f.clone()); // thousands: most weights underflow to 0
        rows.push(f.iter().map(|v| v * 1e-7).collect()); // nearly flat
        let mut masked = f.iter().map(|v| v.clamp(-20.0, 20.0)).collect::<Vec<_>>();
        for (i, v) in masked.iter_mut().enumerate() {
            match i % 5 {
                1 => *v = f32::NEG_INFINITY,
                3 => *v = -1e9,
                _ => {}
            }
        }
        rows.push(masked);
        rows.push(vec![3.5; len]);
    }
    rows.push(vec![f32::MAX, -f32::MAX, 0.0, -0.0, 1e-30, -86.0, -86.5]);
    for row in &rows {
        let mut want = row.clone();
        softmax(&mut want);
        for kern in paths() {
            let mut got = row.clone();
            kern.attention_softmax(&mut got);
            assert_eq!(bits(&got), bits(&want), "{} len {}", kern.isa(), row.len());
        }
    }
}

/// The reference softmax is a softmax: within a few ulp of the f64 one (and of the rounding
/// of `x - max` to f32, which moves `e^(x - max)` by up to `|x - max|` ulp), summing to 1,
/// with masked positions exactly 0.
#[test]
fn softmax_is_within_a_few_ulp_of_f64() {
    for len in [1, 5, 16, 17, 300] {
        let x: Vec<f32> = floats(len, 5)
            .iter()
            .map(|v| (v * 1e-2).min(30.0))
            .collect();
        let mut got = x.clone();
        softmax(&mut got);
        let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let e: Vec<f64> = x.iter().map(|&v| (v as f64 - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for ((g, w), &v) in got.iter().zip(&e).zip(&x) {
            let want = w / sum;
            let ulps = 8.0 + (max - v as f64);
            assert!(
                (*g as f64 - want).abs() <= ulps * f32::EPSILON as f64 * want + 1e-37,
                "len {len}: {g} vs {want}"
            );
        }
        assert!((got.iter().map(|&v| v as f64).sum::<f64>() - 1.0).abs() < 1e-5);
    }
    let mut masked = [1.0, f32::NEG_INFINITY, 2.0, -1e9];
    softmax(&mut masked);
    assert!(masked[1] == 0.0 && masked[3] == 0.0 && masked[0] > 0.0);
}
