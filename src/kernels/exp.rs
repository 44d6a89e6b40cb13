//! The one exponential the float loops of every path use (the attention softmax, the SiLU of
//! the FFN): a polynomial of plain multiplies and adds in a fixed order, so that a path's SIMD
//! lanes and the portable build give the same bits.

/// Below this, [`exp`] is 0: `e^-86` is under `4.5e-38`, so a weight it would give is below
/// any a row's largest value (weight `1 / sum >= 1 / n`) can be told apart from, and `2^n` stays a
/// normal float for every `x` above it.
pub const EXP_MIN: f32 = -86.0;

/// The constants of [`exp`]: `log2(e)`, `ln 2` split in a part exact in a few bits and the
/// rest (Cody and Waite), `1.5 * 2^23` (adding and subtracting it rounds to an integer), and
/// the minimax polynomial of Cephes' `expf` on `[-ln2 / 2, ln2 / 2]`.
pub mod exp_consts {
    /// `log2(e)`.
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// `ln 2`, the part exact in nine bits.
    pub const LN2_HI: f32 = 0.693_359_4;
    /// `ln 2 - LN2_HI`.
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    /// `1.5 * 2^23`: `(t + ROUND) - ROUND` is `t` rounded to the nearest integer, ties to even.
    pub const ROUND: f32 = 12_582_912.0;
    /// The polynomial's coefficients, highest degree first.
    pub const P: [f32; 6] = [
        1.987_569_2e-4,
        1.398_2e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        0.166_666_65,
        0.5,
    ];
}

/// `e^x` for `x <= 0` (what a softmax exponentiates), within a few ulp, 0 below [`EXP_MIN`]
/// (and for NaN): `x = n ln2 + r`, `e^r` by the polynomial, `2^n` added to the exponent bits.
/// Plain multiplies and adds in a fixed order, so every path's lanes give these bits.
/// Written without branches, so that a loop of it vectorises.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    use exp_consts::*;
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    // `t`'s low mantissa bits hold `n` in two's complement: an integer op (where a float-to-int
    // cast would saturate lane by lane and keep the loop from vectorising).
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = P[1..].iter().fold(P[0], |p, &c| p * r + c);
    let e = (p * (r * r) + r) + 1.0;
    let e = f32::from_bits(e.to_bits().wrapping_add(n_bits << 23));
    if x >= EXP_MIN { e } else { 0.0 }
}

/// `x * sigmoid(x)` from [`exp`] of `-|x|` (in its range): `1 / (1 + e^-x)` for `x >= 0`,
/// `e^x / (1 + e^x)` below, so nothing overflows. Branch-free, for the same reason.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    let t = exp(-x.abs());
    let num = if x >= 0.0 { 1.0 } else { t };
    x * (num / (1.0 + t))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`exp`] is within two ulp of the f64 exponential over its whole range, and 0 below it.
    #[test]
    fn exp_is_within_two_ulp() {
        let mut worst = 0.0f64;
        let mut x = EXP_MIN;
        while x <= 0.0 {
            let (got, want) = (exp(x) as f64, (x as f64).exp());
            let ulp = (want as f32).next_up() as f64 - want as f32 as f64;
            worst = worst.max((got - want).abs() / ulp);
            x += 0.000_7;
        }
        assert!(worst <= 2.0, "worst error {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(EXP_MIN - 0.01), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::NAN), 0.0);
    }

    /// [`silu`] is within a few ulp of the f64 one on both sides of 0 (0 where `e^x` is below
    /// `e^-86`), tends to `x` and to 0
    /// at the ends, and passes NaN through.
    #[test]
    fn silu_is_within_a_few_ulp() {
        let mut x = -90.0f32;
        while x <= 90.0 {
            let want = x as f64 / (1.0 + (-x as f64).exp());
            let got = silu(x) as f64;
            let tol = 4.0 * f32::EPSILON as f64 * want.abs() + 1e-35; // 0 below e^-86
            assert!((got - want).abs() <= tol, "silu({x}) = {got}, want {want}");
            x += 0.0131;
        }
        assert_eq!(silu(0.0), 0.0);
        assert_eq!(silu(1e4), 1e4);
        assert_eq!(silu(-1e4), 0.0);
        assert!(silu(f32::NAN).is_nan());
    }
}
