//! A counting Bloom filter (SIGCOMM'26 §5.2 "Fast PMTU lookup").
//!
//! `m` saturating 8-bit counters and `k` positions per key by double hashing from one 64-bit
//! hash (Kirsch and Mitzenmacher). Inserting increments the key's `k` counters, removing
//! decrements them, and a key is "maybe present" when all `k` are non-zero.
//!
//! It never gives a false negative for a key inserted and not yet removed, provided only
//! inserted keys are removed (the [`crate::PmtuCache`] guarantees that). A counter that reaches
//! 255 stays there: decrementing it could drop it below the number of keys really counted in
//! it, which is the one way a counting filter can produce a false negative. With 64 K counters
//! and a few thousand keys that never happens in practice; if it does, the counter only costs
//! a few false positives.

use crate::prober::ConfigError;

/// A counter that reached this value never changes again.
pub const SATURATED: u8 = u8::MAX;

/// The most hash functions a filter may use.
pub const MAX_HASHES: u32 = 16;

/// A counting Bloom filter over 64-bit key hashes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountingBloom {
    counters: Vec<u8>,
    hashes: u32,
}

/// A final mixing step (splitmix64's): spreads every input bit over the whole output.
pub const fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl CountingBloom {
    /// A filter with `counters` counters (SIGCOMM'26: 64 K) and `hashes` positions per key
    /// (SIGCOMM'26: 3).
    pub fn new(counters: usize, hashes: u32) -> Result<Self, ConfigError> {
        if counters == 0 {
            return Err(ConfigError::Zero("bloom counters"));
        }
        if hashes == 0 {
            return Err(ConfigError::Zero("bloom hashes"));
        }
        if hashes > MAX_HASHES {
            return Err(ConfigError::TooLarge {
                name: "bloom hashes",
                value: u64::from(hashes),
                max: u64::from(MAX_HASHES),
            });
        }
        Ok(Self {
            counters: vec![0; counters],
            hashes,
        })
    }

    /// Number of counters.
    pub fn counters(&self) -> usize {
        self.counters.len()
    }

    /// Positions per key.
    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// The `k` counter positions of a key hash: `h1 + i * h2`, each mapped onto `0..m` by a
    /// multiply-shift (no division).
    #[inline]
    fn positions(&self, hash: u64) -> impl Iterator<Item = usize> {
        let m = self.counters.len() as u128;
        let h1 = hash;
        // Odd, so the k positions differ whenever m is a power of two.
        let h2 = mix64(hash ^ 0x9e37_79b9_7f4a_7c15) | 1;
        (0..u64::from(self.hashes)).map(move |i| {
            let g = h1.wrapping_add(i.wrapping_mul(h2));
            ((u128::from(g) * m) >> 64) as usize
        })
    }

    /// Counts a key in.
    pub fn insert(&mut self, hash: u64) {
        for i in self.positions(hash) {
            let c = &mut self.counters[i];
            *c = c.saturating_add(1);
        }
    }

    /// Counts a key out. Call it only for a key that was inserted. Zero and saturated counters
    /// are left alone.
    pub fn remove(&mut self, hash: u64) {
        for i in self.positions(hash) {
            let c = &mut self.counters[i];
            if *c != 0 && *c != SATURATED {
                *c -= 1;
            }
        }
    }

    /// Whether the key may be present: `false` means certainly absent.
    #[inline]
    pub fn contains(&self, hash: u64) -> bool {
        self.positions(hash).all(|i| self.counters[i] != 0)
    }

    /// Counters that are non-zero.
    pub fn occupied(&self) -> usize {
        self.counters.iter().filter(|&&c| c != 0).count()
    }

    /// The textbook false-positive rate with `keys` keys: (1 - e^(-k n / m))^k.
    pub fn expected_fp_rate(&self, keys: usize) -> f64 {
        let k = f64::from(self.hashes);
        let fill = 1.0 - (-k * keys as f64 / self.counters.len() as f64).exp();
        fill.powf(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn insert_contains_remove() {
        let mut f = CountingBloom::new(1 << 16, 3).unwrap();
        let a = mix64(1);
        assert!(!f.contains(a));
        f.insert(a);
        f.insert(a);
        assert!(f.contains(a));
        f.remove(a);
        assert!(f.contains(a));
        f.remove(a);
        assert!(!f.contains(a));
        assert_eq!(f.occupied(), 0);
    }

    #[test]
    fn saturated_counters_stick() {
        let mut f = CountingBloom::new(1, 1).unwrap();
        for _ in 0..300 {
            f.insert(7);
        }
        for _ in 0..300 {
            f.remove(7);
        }
        assert!(f.contains(7), "a saturated counter never decrements");
    }

    #[test]
    fn bad_sizes_are_refused() {
        assert_eq!(
            CountingBloom::new(0, 3),
            Err(ConfigError::Zero("bloom counters"))
        );
        assert_eq!(
            CountingBloom::new(16, 0),
            Err(ConfigError::Zero("bloom hashes"))
        );
        assert!(CountingBloom::new(16, 17).is_err());
    }

    #[test]
    fn measured_fp_rate_is_near_theory() {
        let mut f = CountingBloom::new(1 << 16, 3).unwrap();
        for i in 0..1000u64 {
            f.insert(mix64(i));
        }
        let trials = 200_000u64;
        let fp = (0..trials)
            .filter(|i| f.contains(mix64(1_000_000 + i)))
            .count();
        let measured = fp as f64 / trials as f64;
        let expected = f.expected_fp_rate(1000);
        // ~9e-5 expected: a handful of hits in 200 K; allow wide statistical slack.
        assert!(measured < expected * 4.0 + 1e-4, "{measured} vs {expected}");
    }

    proptest! {
        /// No false negatives under any sequence of inserts and removes of inserted keys, even
        /// with few counters (heavy collisions, saturation).
        #[test]
        fn never_a_false_negative(
            counters in 1usize..64,
            hashes in 1u32..=MAX_HASHES,
            ops in proptest::collection::vec((any::<bool>(), 0u64..40), 0..600),
        ) {
            let mut f = CountingBloom::new(counters, hashes).unwrap();
            let mut present: Vec<u64> = Vec::new();
            for (insert, key) in ops {
                let h = mix64(key);
                if insert {
                    f.insert(h);
                    present.push(key);
                } else if let Some(i) = present.iter().position(|&k| k == key) {
                    present.swap_remove(i);
                    f.remove(h);
                }
                for &k in &present {
                    prop_assert!(f.contains(mix64(k)), "false negative for {}", k);
                }
            }
        }
    }
}
