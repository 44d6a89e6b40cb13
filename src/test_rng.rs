//! The unit tests' one generator: xorshift64, reproducible shapes and values.

/// xorshift64 (13, 7, 17) from a seed spread over the state.
pub(crate) struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (any value: it is mixed and made non-zero).
    pub(crate) fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// The next 64 bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (up to the modulo bias, which tests do not mind).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
