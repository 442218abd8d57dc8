//! A small seeded pseudo-random generator (SplitMix64) for jitter and watch timeouts.
//!
//! The core must be deterministic given its inputs, so randomness comes from a generator seeded
//! by the caller: a runtime seeds it from the OS or the clock, a simulation from its seed.

use core::time::Duration;

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, one add and a mix per output.
///
/// Not cryptographic; good enough for jitter, timeouts and simulation choices.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator with the given seed. Every seed, including 0, is fine.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniformly drawn from `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        // 53 random bits, exactly representable.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A number uniformly drawn from `[0, n)`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant here.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p` (clamped to `[0, 1]`).
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// A duration uniformly drawn from `[lo, hi)`; `lo` when the range is empty.
    pub fn duration_between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo);
        let span_ns = u64::try_from(span.as_nanos()).unwrap_or(u64::MAX);
        lo.saturating_add(Duration::from_nanos(self.below(span_ns)))
    }

    /// A new independent generator derived from this one.
    pub fn fork(&mut self) -> SplitMix64 {
        SplitMix64::new(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        for _ in 0..1000 {
            let f = a.next_f64();
            assert!((0.0..1.0).contains(&f));
            assert!(a.below(10) < 10);
            let d = a.duration_between(Duration::from_secs(1), Duration::from_secs(2));
            assert!(d >= Duration::from_secs(1) && d < Duration::from_secs(2));
        }
        assert_eq!(a.below(0), 0);
    }
}
