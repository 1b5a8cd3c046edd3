//! Heavy-hitter detection for hairpin opt-in (SIGCOMM'26 §4.4 leaves it to the operator; we
//! offer one automatic choice): the Space-Saving algorithm over bytes per flow, in a fixed table
//! of `k` entries, so a worker can run it on every packet without allocating.
//!
//! A flow that sent at least `threshold` bytes in a window is reported once, and the caller
//! opts it in ([`crate::rxq::Op::OptIn`]). Space-Saving over-estimates a flow by at most the
//! smallest count in the table, so with `k` well above the number of flows that can reach the
//! threshold in one window, a reported flow really was heavy.

use crate::wire::FlowKey;

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: FlowKey,
    bytes: u64,
}

/// Space-Saving heavy hitters over bytes, `k` entries.
#[derive(Clone, Debug)]
pub struct HeavyHitters {
    entries: Vec<Entry>,
    k: usize,
    reported: Vec<FlowKey>,
    max_reported: usize,
}

impl HeavyHitters {
    /// A table of `k` flows; at most `max_reported` flows are reported over its life (the
    /// NIC's rule budget for opted-in flows).
    pub fn new(k: usize, max_reported: usize) -> Self {
        Self {
            entries: Vec::with_capacity(k.max(1)),
            k: k.max(1),
            reported: Vec::with_capacity(max_reported),
            max_reported,
        }
    }

    /// Counts `bytes` for flow `key`.
    pub fn observe(&mut self, key: &FlowKey, bytes: u32) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == *key) {
            e.bytes += u64::from(bytes);
            return;
        }
        if self.entries.len() < self.k {
            self.entries.push(Entry {
                key: *key,
                bytes: u64::from(bytes),
            });
            return;
        }
        // Replace the smallest, inheriting its count (Space-Saving's over-estimate).
        if let Some(min) = self.entries.iter_mut().min_by_key(|e| e.bytes) {
            min.key = *key;
            min.bytes += u64::from(bytes);
        }
    }

    /// Ends a window: flows with at least `threshold` bytes in it that were never reported are
    /// appended to `out`; the counts start again.
    pub fn end_window(&mut self, threshold: u64, out: &mut Vec<FlowKey>) {
        for e in &self.entries {
            if e.bytes >= threshold
                && self.reported.len() < self.max_reported
                && !self.reported.contains(&e.key)
            {
                self.reported.push(e.key);
                out.push(e.key);
            }
        }
        self.entries.clear();
    }

    /// Flows reported so far.
    pub fn reported(&self) -> &[FlowKey] {
        &self.reported
    }
}

/// Finds heavy hitters among the traffic left on the NIC: reads the sample queue of a sampled
/// hairpin rule ([`crate::rxq::Sample`]), counts each sampled packet as `ratio` packets of its
/// size, and at the end of each window reports flows above a rate (§4.4). Run by the rule
/// manager thread, so workers do none of it.
pub struct HeavyHitterMonitor<R: crate::rxq::RxRing> {
    ring: R,
    port: usize,
    ratio: u32,
    threshold_bytes: u64,
    window_ns: u64,
    window_start: Option<u64>,
    hh: HeavyHitters,
    scratch: Vec<R::Pkt>,
}

impl<R: crate::rxq::RxRing> HeavyHitterMonitor<R> {
    /// Watches `ring` (port `port`'s sample queue, fed one packet in `ratio`); a flow sending
    /// more than `threshold_bps` bits per second over a window of `window_ns` is opted in, at
    /// most `max_flows` over the monitor's life (the NIC's rule budget).
    pub fn new(
        ring: R,
        port: usize,
        ratio: u32,
        threshold_bps: u64,
        window_ns: u64,
        max_flows: usize,
    ) -> Self {
        Self {
            ring,
            port,
            ratio: ratio.max(1),
            threshold_bytes: (threshold_bps as u128 * u128::from(window_ns) / 8_000_000_000) as u64,
            window_ns,
            window_start: None,
            hh: HeavyHitters::new(256, max_flows),
            scratch: Vec::with_capacity(64),
        }
    }
}

impl<R> crate::rxq::Monitor for HeavyHitterMonitor<R>
where
    R: crate::rxq::RxRing + Send,
    R::Pkt: Send,
{
    fn poll(&mut self, now_ns: u64, out: &mut Vec<(usize, FlowKey)>) {
        use crate::buf::PacketBuf;
        use crate::wire::{classify, Class};
        while self.ring.rx_into(&mut self.scratch, 64) > 0 {
            for pkt in self.scratch.drain(..) {
                if let Class::Tcp(h) | Class::Udp(h) = classify(pkt.head(), pkt.len()) {
                    let bytes = (pkt.len() as u64 * u64::from(self.ratio)).min(u64::from(u32::MAX));
                    self.hh.observe(&h.key, bytes as u32);
                }
            }
        }
        let start = *self.window_start.get_or_insert(now_ns);
        if now_ns.saturating_sub(start) >= self.window_ns {
            let mut keys = Vec::new();
            self.hh.end_window(self.threshold_bytes, &mut keys);
            out.extend(keys.into_iter().map(|k| (self.port, k)));
            self.window_start = Some(now_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u16) -> FlowKey {
        FlowKey {
            src: [n as u8; 16],
            dst: [1; 16],
            sport: n,
            dport: 80,
            proto: 6,
            v6: true,
        }
    }

    #[test]
    fn elephants_are_reported_once_and_mice_never() {
        let mut hh = HeavyHitters::new(16, 8);
        let mut out = Vec::new();
        for round in 0..3 {
            for i in 0..1000u16 {
                hh.observe(&key(i % 200 + 10), 100); // 200 mice, 500 B each per window
                if i % 4 == 0 {
                    hh.observe(&key(1), 1500);
                    hh.observe(&key(2), 1500);
                }
            }
            hh.end_window(100_000, &mut out);
            if round == 0 {
                let mut got = out.clone();
                got.sort_by_key(|k| k.sport);
                assert_eq!(got, vec![key(1), key(2)]);
            }
        }
        assert_eq!(out.len(), 2, "reported once each");
        assert_eq!(hh.reported().len(), 2);
    }
}
