//! Base-3 bytes: 5 trits per byte (3^5 = 243 <= 256), stored as the fixed-point fraction
//! `ceil(256 * q / 243)` so that trit `n` comes out with a multiply and a compare.

/// Trit `n` (0..5) of a packed byte, in 0..=2: `((uint8_t)(b * 3^n) * 3) >> 8`, computed as the
/// number of thresholds the rotated byte `v = (uint8_t)(b * 3^n)` crosses: `(v >= 86) + (v >= 171)`
/// (`3v >= 256` iff `v >= 86`, `3v >= 512` iff `v >= 171`), the form SIMD compares use.
#[inline]
pub fn trit(b: u8, n: u32) -> u8 {
    let v = b.wrapping_mul(3u8.wrapping_pow(n));
    (v >= 86) as u8 + (v >= 171) as u8
}

/// Trit `n` (0..5) of every byte of `bytes` into `out` (pairs up to the shorter of the two): the
/// same threshold decode as [`trit`], written as one pass over the bytes so that the compiler
/// turns it into SIMD compares (SSE2 on any x86_64, NEON on aarch64).
#[inline]
pub fn decode_trits(bytes: &[u8], n: u32, out: &mut [u8]) {
    let mul = 3u8.wrapping_pow(n);
    for (o, &b) in out.iter_mut().zip(bytes) {
        let v = b.wrapping_mul(mul);
        *o = (v >= 86) as u8 + (v >= 171) as u8;
    }
}

/// Packs up to 5 trits (0..=2, least significant first in the sense of [`trit`]) into one byte.
pub fn pack_trits(trits: &[u8]) -> u8 {
    debug_assert!(trits.len() <= 5);
    let q =
        trits.iter().fold(0u32, |q, &t| q * 3 + t.min(2) as u32) * 3u32.pow(5 - trits.len() as u32);
    (q * 256).div_ceil(243) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_decode_equals_the_multiply_shift_form_for_every_byte() {
        for b in 0..=255u8 {
            for n in 0..5 {
                let v = b.wrapping_mul(3u8.pow(n));
                assert_eq!(trit(b, n), ((v as u16 * 3) >> 8) as u8, "byte {b} trit {n}");
            }
        }
    }

    #[test]
    fn slice_decode_equals_the_scalar_decode_for_every_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        for n in 0..5 {
            let mut out = vec![9u8; 256];
            decode_trits(&bytes, n, &mut out);
            for (&b, &t) in bytes.iter().zip(&out) {
                assert_eq!(t, trit(b, n), "byte {b} trit {n}");
            }
        }
    }

    #[test]
    fn all_243_valid_bytes_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for q in 0..243u32 {
            let digits: Vec<u8> = (0..5).rev().map(|i| (q / 3u32.pow(i) % 3) as u8).collect();
            let b = pack_trits(&digits);
            assert!(seen.insert(b), "two values pack to byte {b}");
            let back: Vec<u8> = (0..5).map(|n| trit(b, n)).collect();
            assert_eq!(back, digits, "value {q}");
        }
    }
}
