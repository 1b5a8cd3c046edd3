//! Adaptive delayed merging (SIGCOMM'26 §4.1 and Appendix A): how long the tail item of a flow may
//! wait for the segments that would fill it, and the scheduling of those waits.
//!
//! ETM = Γ⁻¹(p; k, θ) with k = ⌈(iMTU − L) / PMTU⌉ and θ = PMTU / R. Since
//! Γ⁻¹(p; k, θ) = θ · Γ⁻¹(p; k, 1), the unit quantiles Γ⁻¹(p; k, 1) are computed once per k
//! with statrs when the engine starts; the hot path is one table read and two multiplications.
//!
//! Only a flow's incomplete tail item waits, and only when the flow is fast (its rate average is
//! at least the threshold) and its conversion yield is low (below the bypass). Its deadline goes
//! into a heap ([`Etm`]) that [`Merger::poll`] drains.

use statrs::distribution::{ContinuousCDF, Gamma};

use super::config::DelayConfig;
use super::flow_table::{flags, FlowEntry, NIL};
use super::segment::Segment;
use super::timers::Timers;
use super::Merger;
use crate::buf::PacketBuf;

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
    // Through i64: one instruction (`cvtsi2ss`), where u64 to f32 is a branchy sequence; the
    // value is the same for every Δt below 2^63 ns.
    let dt = dt_ns.min(i64::MAX as u64) as i64 as f32;
    let decay = (1.0 - dt * inv_tau).max(0.0);
    rate * decay + bytes as f32 * inv_tau
}

/// Notes in flow entry `e` a segment of `ip_len` IP bytes carrying `payload_len` bytes of
/// payload, arrived at `now`: its rate average (time constant 1/`inv_tau`) and its MSS.
#[inline(always)]
pub(super) fn arrive(e: &mut FlowEntry, ip_len: u16, payload_len: u16, now: u64, inv_tau: f32) {
    let dt = now.saturating_sub(e.last_seen);
    // The rest of a burst (Δt = 0) only adds: what `update_rate` computes then (its decay is
    // exactly 1), without the decay's arithmetic.
    e.rate = if dt == 0 {
        e.rate + f32::from(ip_len) * inv_tau
    } else {
        update_rate(e.rate, dt, u32::from(ip_len), inv_tau)
    };
    e.last_seen = now;
    e.mss = e.mss.max(payload_len);
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

/// [`update_yield`] for `n` full packets in a row (the whole pieces of a TSO packet): in closed
/// form, 1 − (1 − y)(1 − α)ⁿ, where `n` updates one by one would be a chain of `n` dependent
/// floating-point steps on every TSO packet sent.
#[inline]
pub fn update_yield_full(y: f32, n: u32) -> f32 {
    /// (1 − α)ⁿ for the piece counts TSO packets carry at common iMTUs.
    const KEEP: [f32; 16] = {
        let mut t = [1.0f32; 16];
        let mut i = 1;
        while i < t.len() {
            t[i] = t[i - 1] * (1.0 - YIELD_ALPHA);
            i += 1;
        }
        t
    };
    let keep = match KEEP.get(n as usize) {
        Some(&k) => k,
        None => (1.0 - YIELD_ALPHA).powi(n.min(i32::MAX as u32) as i32),
    };
    1.0 - (1.0 - y) * keep
}

/// The ETM scheduler's state, kept in the engine: the heap of pending deadlines and the model's
/// constants, derived once from the [`DelayConfig`].
#[derive(Debug)]
pub(super) struct Etm {
    /// Each waiting tail item's deadline, by flow, earliest first.
    pub(super) timers: Timers,
    quantiles: UnitGammaQuantiles,
    /// Rate threshold in bytes/ns.
    rate_threshold: f32,
    /// 1 / rate time constant, per ns.
    inv_tau: f32,
}

impl Etm {
    /// The scheduler for `cfg`, for a flow table of `flow_capacity` entries.
    pub(super) fn new(cfg: &DelayConfig, flow_capacity: usize) -> Self {
        Self {
            quantiles: UnitGammaQuantiles::new(cfg.quantile),
            rate_threshold: (cfg.rate_threshold_bps / 8e9) as f32,
            inv_tau: (1.0 / cfg.rate_tau_ns as f64) as f32,
            timers: Timers::new(flow_capacity),
        }
    }

    /// 1 / the rate's time constant, per ns.
    pub(super) fn inv_tau(&self) -> f32 {
        self.inv_tau
    }

    /// The rate threshold, bytes/ns.
    pub(super) fn rate_threshold(&self) -> f32 {
        self.rate_threshold
    }

    /// Forgets every pending deadline.
    pub(super) fn clear(&mut self) {
        self.timers.clear();
    }
}

impl<B: PacketBuf> Merger<B> {
    /// Updates the flow's rate average and MSS with an arriving segment.
    pub(super) fn update_flow_on_arrival(&mut self, flow: u32, seg: &Segment, now: u64) {
        self.note_arrival(flow, seg.ip_len, seg.payload_len, now);
    }

    /// [`update_flow_on_arrival`](Self::update_flow_on_arrival) for a segment of `ip_len` IP
    /// bytes carrying `payload_len` bytes of payload.
    #[inline]
    pub(super) fn note_arrival(&mut self, flow: u32, ip_len: u16, payload_len: u16, now: u64) {
        let inv_tau = self.etm.inv_tau;
        arrive(self.flows.get_mut(flow), ip_len, payload_len, now, inv_tau);
    }

    /// Emits every delayed tail item whose window has passed by `now`.
    pub fn poll(&mut self, now: u64, out: &mut Vec<B>) {
        while let Some((due, flow)) = self.etm.timers.peek() {
            if due > now {
                break;
            }
            self.etm.timers.pop();
            self.flows.get_mut(flow).flags &= !flags::TIMED;
            self.flush_flow(flow, now, out);
        }
        self.flush_delay_record();
    }

    /// `flow`'s ETM deadline, or 0 when it has none. The timer heap is asked only when the
    /// flow's entry says it holds one ([`flags::TIMED`]).
    #[inline]
    pub(super) fn deadline_of(&self, flow: u32) -> u64 {
        if self.flows.get(flow).flags & flags::TIMED == 0 {
            return 0;
        }
        self.etm.timers.deadline(flow)
    }

    /// Sets `flow`'s ETM deadline to `due`.
    #[inline]
    fn set_deadline(&mut self, flow: u32, due: u64) {
        let e = self.flows.get_mut(flow);
        if e.flags & flags::TIMED == 0 {
            e.flags |= flags::TIMED;
            self.etm.timers.insert(flow, due);
        } else {
            self.etm.timers.set(flow, due);
        }
    }

    /// Removes `flow`'s ETM deadline, if it has one.
    #[inline]
    pub(super) fn cancel_deadline(&mut self, flow: u32) {
        let e = self.flows.get_mut(flow);
        if e.flags & flags::TIMED != 0 {
            e.flags &= !flags::TIMED;
            self.etm.timers.cancel(flow);
        }
    }

    /// The earliest pending ETM deadline, if any: when a poll loop with nothing to receive
    /// should call [`poll`](Self::poll) next. Exact: a deadline moves with its flow's tail and
    /// goes when the flow's items leave (see `timers`).
    pub fn next_deadline(&self) -> Option<u64> {
        self.etm.timers.peek().map(|(due, _)| due)
    }

    /// Settles one flow after a burst: every item but the tail goes out; the tail waits for its
    /// ETM window when the flow is eligible, else it goes too.
    pub(super) fn settle_flow(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        // Everything but the tail goes now.
        loop {
            let head = self.flows.get(flow).items;
            if head == NIL || self.items[head as usize].next == NIL {
                break;
            }
            self.emit_head(flow, now, out);
        }
        let tail = self.flows.get(flow).items;
        if tail == NIL {
            return;
        }
        let e = *self.flows.get(flow);
        // The tail's deadline from an earlier burst, or 0.
        let held = self.deadline_of(flow);
        let it = &self.items[tail as usize];
        let d = &self.cfg.delay;
        // What the wait is for: the item, or with TSO past the iMTU its last piece, which the
        // NIC would send short. The whole pieces wait with it (one packet for the NIC, and
        // no cut: splitting the item at every burst's end cost more than the cuts TSO saves),
        // no longer than its window, which starts at the item's oldest segment. An item of
        // whole pieces has nothing to wait for.
        let imtu = u32::from(self.cfg.imtu);
        let pieces = self.tso_pieces(it.layout, it.payload_len);
        let waiting_len = pieces.map_or(it.ip_len(), |p| it.layout.l3_l4_len() + p.last);
        let incomplete = waiting_len > it.layout.l3_l4_len();
        // A flow whose yield is already high needs no wait (the bypass), except for a tail that
        // holds the rest of a cut, or whole TSO pieces: the flow is mid-stream (its last packet
        // left full, or its tail holds full pieces), and flushing the rest now would send a runt
        // where waiting for the next RX burst makes a full packet (an NF behind pays per packet,
        // not per byte). Without this, the bypass itself caps the yield: a flow above it stops
        // waiting, sends runts, and drops below it again.
        let eligible = d.enabled
            && incomplete
            && !it.closed()
            && e.rate >= self.etm.rate_threshold
            && (it.carried() || pieces.is_some() || f64::from(e.yield_avg) <= d.yield_bypass);
        if !eligible {
            return self.flush_flow(flow, now, out);
        }
        let pmtu = u32::from(e.mss) + it.layout.l3_l4_len();
        let etm = self
            .etm
            .quantiles
            .etm_ns(imtu, waiting_len, pmtu, f64::from(e.rate))
            .min(d.max_window_ns as f64);
        let deadline = if let Some(p) = pieces {
            // With TSO the tail's last piece is what waits, and it began after the whole pieces:
            // its window is anchored where its first byte arrived, estimated from the item's
            // arrival span (its bytes arrived between the oldest segment and the flow's last),
            // and a new piece gets a new window. No byte waits longer than the longest window
            // after the item's oldest segment.
            let span = e.last_seen.max(it.oldest) - it.oldest;
            // In 64 bits (a 128-bit division is a library call): the span is at most the
            // time the item was held, and saturating only caps an anchor that `min(now)` caps.
            let whole = u64::from(p.whole * p.segsz);
            let share = span.saturating_mul(whole) / u64::from(it.payload_len);
            let anchor = (it.oldest + share).min(now);
            (anchor + etm as u64)
                .min(it.oldest + d.max_window_ns)
                .max(1)
        } else {
            // Anchored at the item's oldest segment: no segment waits longer than the window.
            let deadline = (it.oldest.min(now) + etm as u64).max(1);
            match held {
                0 => deadline,
                held => deadline.min(held),
            }
        };
        if deadline <= now {
            return self.flush_flow(flow, now, out);
        }
        if held == 0 {
            self.stats.delayed_items += 1;
        }
        self.set_deadline(flow, deadline);
    }
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
    fn full_packets_in_closed_form_move_the_yield_as_one_by_one() {
        for y0 in [0.0f32, 0.3, 0.93, 1.0] {
            let mut y = y0;
            for n in 0..100u32 {
                let closed = update_yield_full(y0, n);
                assert!((closed - y).abs() < 1e-5, "y0 {y0} n {n}: {closed} vs {y}");
                assert!((0.0..=1.0).contains(&closed));
                y = update_yield(y, true, 1.0);
            }
        }
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

    /// `note_arrival` adds within a burst (Δt = 0) without the decay: it must give exactly
    /// what `update_rate` gives there, bit for bit, or the burst and one-by-one paths could
    /// disagree on an ETM decision.
    #[test]
    fn adding_within_a_burst_is_exactly_update_rate_at_dt_zero() {
        for inv_tau in [1e-6f32, 1.0 / 3e5, 0.37] {
            let mut r = 0.0f32;
            for bytes in [1500u16, 52, 9000, 65535, 1, 1428] {
                let added = r + f32::from(bytes) * inv_tau;
                assert_eq!(
                    added.to_bits(),
                    update_rate(r, 0, u32::from(bytes), inv_tau).to_bits()
                );
                r = added;
            }
        }
    }
}
