//! Adaptive delayed merging (SIGCOMM'26 Appendix A): how long the tail item of a flow may wait
//! for the segments that would fill it.
//!
//! ETM = Γ⁻¹(p; k, θ) with k = ⌈(iMTU − L) / PMTU⌉ and θ = PMTU / R. Since
//! Γ⁻¹(p; k, θ) = θ · Γ⁻¹(p; k, 1), the unit quantiles Γ⁻¹(p; k, 1) are computed once per k
//! with statrs when the engine starts; the hot path is one table read and two multiplications.

use statrs::distribution::{ContinuousCDF, Gamma};

/// Largest k the table covers: iMTU 65535 over a 1280 B path MTU needs 52.
pub const MAX_K: usize = 64;

/// Γ⁻¹(p; k, 1) for k = 1..=[`MAX_K`].
#[derive(Clone, Debug)]
pub struct UnitGammaQuantiles {
    p: f64,
    table: [f64; MAX_K + 1],
}

impl UnitGammaQuantiles {
    /// Computes the table for quantile `p` (0 < p < 1) with statrs's numerical inverse.
    ///
    /// # Panics
    /// If `p` is not inside (0, 1); [`MergeConfig::validate`](super::MergeConfig::validate)
    /// rejects such values first.
    pub fn new(p: f64) -> Self {
        assert!(p > 0.0 && p < 1.0, "quantile {p} outside (0, 1)");
        let mut table = [0.0; MAX_K + 1];
        for (k, q) in table.iter_mut().enumerate().skip(1) {
            *q = Gamma::new(k as f64, 1.0)
                .expect("shape k >= 1 and rate 1 are valid")
                .inverse_cdf(p);
        }
        Self { p, table }
    }

    /// The quantile these values are for.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Γ⁻¹(p; k, 1), with k clamped to 1..=[`MAX_K`].
    #[inline]
    pub fn unit(&self, k: usize) -> f64 {
        self.table[k.clamp(1, MAX_K)]
    }

    /// The ETM window in ns for a tail item of `held_len` IP bytes, input packets of `pmtu` IP
    /// bytes, a target of `imtu`, and a flow rate of `rate` bytes/ns.
    #[inline]
    pub fn etm_ns(&self, imtu: u32, held_len: u32, pmtu: u32, rate_bytes_per_ns: f64) -> f64 {
        if rate_bytes_per_ns <= 0.0 || pmtu == 0 {
            return f64::INFINITY;
        }
        let missing = imtu.saturating_sub(held_len);
        let k = missing.div_ceil(pmtu) as usize;
        let theta = f64::from(pmtu) / rate_bytes_per_ns;
        theta * self.unit(k)
    }
}

/// A flow's throughput, as an exponentially weighted moving average over arrivals with time
/// constant τ (`inv_tau` = 1/τ, per ns): each arrival decays the estimate by (1 − Δt/τ)
/// (clamped at 0) and adds bytes/τ. At a steady rate R the estimate converges to R; packets of
/// one RX burst (Δt = 0) simply add up.
#[inline]
pub fn update_rate(rate: f32, dt_ns: u64, bytes: u32, inv_tau: f32) -> f32 {
    let decay = (1.0 - dt_ns as f32 * inv_tau).max(0.0);
    rate * decay + bytes as f32 * inv_tau
}

/// Weight of one full-sized packet in the conversion-yield average: the average spans about
/// the last 32 iMTU packets' worth of bytes.
pub const YIELD_ALPHA: f32 = 1.0 / 32.0;

/// Moves a flow's conversion-yield average toward `full` (1.0 when an emitted item was
/// iMTU-bound, else 0.0), weighting by the item's share of a full packet, so the average is
/// over bytes, as the yield is.
#[inline]
pub fn update_yield(y: f32, full: bool, weight: f32) -> f32 {
    let target = if full { 1.0 } else { 0.0 };
    y + (target - y) * YIELD_ALPHA * weight.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_agrees_with_statrs_for_every_k() {
        let q = UnitGammaQuantiles::new(0.95);
        for k in 1..=MAX_K {
            let direct = Gamma::new(k as f64, 1.0).unwrap().inverse_cdf(0.95);
            assert!((q.unit(k) - direct).abs() < 1e-9, "k={k}");
            // The scale property the table relies on: Γ⁻¹(p; k, θ) = θ·Γ⁻¹(p; k, 1).
            // statrs parameterises by rate = 1/θ.
            for theta in [0.5, 6.0, 120.0] {
                let scaled = Gamma::new(k as f64, 1.0 / theta).unwrap().inverse_cdf(0.95);
                assert!(
                    (theta * q.unit(k) - scaled).abs() < 1e-6 * scaled,
                    "k={k} θ={theta}"
                );
            }
        }
        // Known values: the 95 % quantile of Exp(1) is ln 20.
        assert!((q.unit(1) - 20f64.ln()).abs() < 1e-9);
    }

    #[test]
    fn etm_matches_equation_1() {
        let q = UnitGammaQuantiles::new(0.95);
        // 2 Gb/s = 0.25 B/ns; L = 3000 of 9000 with 1500 B packets: k = 4, θ = 6000 ns.
        let etm = q.etm_ns(9000, 3000, 1500, 0.25);
        let expected = 6000.0 * Gamma::new(4.0, 1.0).unwrap().inverse_cdf(0.95);
        assert!((etm - expected).abs() < 1e-6);
        assert!(q.etm_ns(9000, 3000, 1500, 0.0).is_infinite());
        // Fuller items wait less.
        assert!(q.etm_ns(9000, 7500, 1500, 0.25) < etm);
    }

    #[test]
    fn yield_average_follows_the_byte_share() {
        // Two thirds of the bytes in full packets: the average settles near 2/3... weighted by
        // size: full items weigh 1, partial ones 0.5.
        let mut y = 0.0f32;
        for _ in 0..2000 {
            y = update_yield(y, true, 1.0);
            y = update_yield(y, false, 0.5);
        }
        assert!((y - 2.0 / 3.0).abs() < 0.03, "{y}");
        // One full packet does not flip a flow's average.
        assert!(update_yield(0.0, true, 1.0) < 0.1);
    }

    #[test]
    fn rate_estimate_converges_to_the_offered_rate() {
        // 1500 B every 6 µs = 0.25 B/ns.
        let mut r = 0.0f32;
        for _ in 0..10_000 {
            r = update_rate(r, 6_000, 1500, 1e-6);
        }
        assert!((r - 0.25).abs() < 0.01, "{r}");
        // A long silence resets it.
        assert!(update_rate(r, 5_000_000, 1500, 1e-6) < 0.01);
    }
}
