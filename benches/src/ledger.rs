//! What came out of an engine, measured the same way for every engine: conversion yield, added
//! delay, and a check that every input packet came out exactly once with its bytes intact.
//!
//! **Conversion yield** (SIGCOMM'26 §7.1) is the share of input payload bytes that leave in
//! iMTU-bound packets: packets that could not take one more input segment. With a 9000 B iMTU,
//! IPv4 and TCP with time stamps leave `cap = 9000 - 20 - 32 = 8948` payload bytes, so a packet
//! with `P` payload bytes is iMTU-bound when `P + 1448 > 8948`. `rte_gro` has no size cap (it
//! merges up to 64 KB), so an output of `P` bytes is counted as if it had been cut at the cap:
//! `floor(P / cap) * cap` bytes are iMTU-bound, plus the remainder when the remainder itself
//! could not take one more segment. For an engine that respects the cap (`P <= cap`) the rule
//! reduces to the plain definition, so one rule serves both. An output that asks the NIC to cut
//! it at the iMTU (TSO, [`Ledger::record_tso`]) is counted by the same rule: it is the pieces
//! the NIC puts on the wire.
//!
//! **Packets per iMTU** is what the yield hides: how many packets leave per iMTU's worth of
//! payload, `outputs / (input payload / cap)`; 1.0 is ideal, and every runt a cut leaves behind
//! raises it. An uncapped output of `P` bytes (rte_gro) counts as the `ceil(P / cap)` packets it
//! would be cut into, by the same rule as the yield.
//!
//! **Added delay** of an input packet is its emission time minus the time the engine received
//! it, both in simulated time: the emission time is the time of the RX burst (or final flush)
//! during which the engine handed the packet out, the receive time is its RX burst's time
//! ([`Trace::delivery_ns`]), so RX batching is not counted against the engine. An output is
//! traced back to its member segments through its sequence range, byte by byte (an engine that
//! cuts segments at the iMTU, like pxio, emits parts of one segment in two outputs): a segment
//! counts as emitted, and gets its delay, when its last byte leaves.

use hdrhistogram::Histogram;

use crate::trace::layout::*;
use crate::trace::{Layout, Trace};

/// The longest headers a trace has (Ethernet, IPv6, TCP with time stamps).
const MAX_HEADERS_LEN: usize = ETH_LEN + 40 + TCP_LEN;

/// Longest delay the histogram resolves: a minute.
const MAX_DELAY_NS: u64 = 60_000_000_000;

/// The iMTU the benches assume.
pub const DEFAULT_IMTU: usize = 9000;

/// Counts of what an engine got wrong; all zero for a correct engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Outputs whose headers are not the trace's Ethernet/IPv4/TCP layout, or whose flow or
    /// bytes are not the trace's.
    pub malformed: u64,
    /// Outputs whose IPv4 total length disagrees with their size.
    pub bad_ip_length: u64,
    /// Input segments some of whose bytes came out more than once.
    pub duplicated: u64,
    /// Input segments that never came out.
    pub missing: u64,
    /// Outputs whose payload bytes differ from the flow's stream (when verification is on).
    pub corrupted: u64,
    /// Segments emitted before the engine received them.
    pub early: u64,
    /// Outputs longer than the iMTU, from an engine that must respect it
    /// ([`Ledger::enforcing_imtu`]).
    pub oversize: u64,
}

impl Faults {
    /// Whether nothing went wrong.
    pub fn is_clean(&self) -> bool {
        *self == Self::default()
    }
}

/// An engine broke the trace's packets.
#[derive(Debug, thiserror::Error)]
#[error("{engine} output is wrong: {faults:?}")]
pub struct LedgerError {
    /// Which engine.
    pub engine: String,
    /// What went wrong, counted.
    pub faults: Faults,
}

/// The measured outcome of one engine on one trace, apart from its CPU cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Share of input payload bytes that left in iMTU-bound packets, 0..=1.
    pub conversion_yield: f64,
    /// Mean added delay per input packet, µs of simulated time.
    pub mean_delay_us: f64,
    /// 99th percentile of the added delay, µs.
    pub p99_delay_us: f64,
    /// Largest added delay, µs.
    pub max_delay_us: f64,
    /// Packets the engine emitted.
    pub output_packets: u64,
    /// Mean input segments per output packet.
    pub segments_per_output: f64,
    /// Output packets (an uncapped one counted as cut at the iMTU) per iMTU of input payload;
    /// 1.0 is ideal.
    pub packets_per_imtu: f64,
}

/// Records an engine's outputs against the trace. Feed it every packet the engine emits, then
/// call [`finish`](Self::finish).
pub struct Ledger<'t> {
    trace: &'t Trace,
    engine: String,
    verify_payload: bool,
    /// Payload bytes an iMTU-bound packet holds at most.
    cap: usize,
    /// Payload bytes of each input slot emitted so far.
    emitted: Vec<u16>,
    delays_ns: Histogram<u64>,
    delay_sum_ns: u128,
    bound_bytes: u64,
    output_packets: u64,
    /// Output packets with each uncapped one counted as the packets it would be cut into.
    capped_packets: u64,
    faults: Faults,
    /// The headers of the output being recorded.
    head: [u8; MAX_HEADERS_LEN],
    /// Where the fields are in the trace's frames.
    layout: Layout,
    /// A copy of the output being recorded, when verifying payloads.
    copy: Vec<u8>,
    /// Whether an output longer than the iMTU is a fault (else it counts as cut there).
    enforce_imtu: bool,
}

impl<'t> Ledger<'t> {
    /// A ledger for `engine`'s outputs on `trace`, with iMTU `imtu`. With `verify_payload`,
    /// every payload byte is also compared with the flow's stream (a copy and a compare per
    /// byte; recording is never timed, but it lengthens the run).
    pub fn new(trace: &'t Trace, engine: &str, imtu: usize, verify_payload: bool) -> Self {
        Self {
            trace,
            engine: engine.to_owned(),
            verify_payload,
            cap: imtu.saturating_sub(trace.layout().l3_len + TCP_LEN),
            emitted: vec![0; trace.len()],
            delays_ns: Histogram::new_with_bounds(1, MAX_DELAY_NS, 3)
                .expect("valid bounds and precision"),
            delay_sum_ns: 0,
            bound_bytes: 0,
            output_packets: 0,
            capped_packets: 0,
            faults: Faults::default(),
            head: [0; MAX_HEADERS_LEN],
            layout: trace.layout(),
            copy: Vec::new(),
            enforce_imtu: false,
        }
    }

    /// The same ledger for an engine whose outputs must fit the iMTU (pxio, or rte_gro followed
    /// by rte_gso): a longer one is a fault ([`Faults::oversize`]).
    pub fn enforcing_imtu(mut self) -> Self {
        self.enforce_imtu = true;
        self
    }

    /// Payload bytes of a `payload`-byte output that count as iMTU-bound (see the module docs).
    pub fn bound_bytes(&self, payload: usize) -> usize {
        if self.cap == 0 {
            return 0;
        }
        let whole = payload / self.cap * self.cap;
        let rest = payload - whole;
        whole
            + if rest + self.layout.mss > self.cap {
                rest
            } else {
                0
            }
    }

    /// Records one output packet emitted at simulated time `emit_ns`. `visit` must call its
    /// argument once per segment of the packet, in order: `|f| mbuf.segments().for_each(f)`, or
    /// `|f| heap_buf.for_each_segment(f)`.
    pub fn record<F>(&mut self, visit: F, emit_ns: u64)
    where
        F: FnOnce(&mut dyn FnMut(&[u8])),
    {
        self.record_tso(visit, emit_ns, None);
    }

    /// [`record`](Self::record) for an output that asks the NIC to cut it into pieces of
    /// `tso_segsz` payload bytes (TSO): past the iMTU it is no fault when its pieces fit it,
    /// and it counts as those pieces, by the same rule as an uncapped output.
    pub fn record_tso<F>(&mut self, visit: F, emit_ns: u64, tso_segsz: Option<u16>)
    where
        F: FnOnce(&mut dyn FnMut(&[u8])),
    {
        self.output_packets += 1;
        let mut total = 0usize;
        let (head, copy, verify) = (&mut self.head, &mut self.copy, self.verify_payload);
        let (hl, mss) = (self.layout.headers_len, self.layout.mss);
        copy.clear();
        visit(&mut |seg: &[u8]| {
            if total < hl {
                let n = (hl - total).min(seg.len());
                head[total..total + n].copy_from_slice(&seg[..n]);
            }
            if verify {
                copy.extend_from_slice(seg);
            }
            total += seg.len();
        });
        let Some((flow, start)) = self.parse(total) else {
            self.faults.malformed += 1;
            return;
        };
        let payload = total - hl;
        let cut_to_cap = tso_segsz.is_some_and(|s| usize::from(s) == self.cap);
        if self.enforce_imtu && payload > self.cap && !cut_to_cap {
            self.faults.oversize += 1;
        }
        let (first_seg, offset) = ((start / mss) as u32, start % mss);
        if verify
            && !self
                .trace
                .payload_matches(flow, first_seg, offset, &self.copy[hl..])
        {
            self.faults.corrupted += 1;
        }
        self.bound_bytes += self.bound_bytes(payload) as u64;
        self.capped_packets += payload.div_ceil(self.cap.max(1)).max(1) as u64;
        let end = start + payload;
        for seg in first_seg as usize..end.div_ceil(mss) {
            let Some(slot) = self.trace.slot_of(flow, seg as u32) else {
                self.faults.malformed += 1;
                return;
            };
            let covered = end.min((seg + 1) * mss) - start.max(seg * mss);
            let bytes = usize::from(self.emitted[slot]) + covered;
            self.emitted[slot] = bytes.min(usize::from(u16::MAX)) as u16;
            if bytes > mss {
                self.faults.duplicated += 1;
                continue;
            }
            if bytes < mss {
                continue; // the segment's last byte has not left yet
            }
            let received = self.trace.delivery_ns(slot);
            let Some(delay) = emit_ns.checked_sub(received) else {
                self.faults.early += 1;
                continue;
            };
            self.delay_sum_ns += u128::from(delay);
            // Within bounds by construction; a longer delay (a trace of over a minute) is
            // clamped, the mean stays exact.
            self.delays_ns.saturating_record(delay.min(MAX_DELAY_NS));
        }
    }

    /// Records each of `pkts` (an engine's outputs on real mbufs) as emitted at `emit_ns`, and
    /// frees it.
    pub fn record_mbufs(&mut self, pkts: impl IntoIterator<Item = dpdk::Mbuf>, emit_ns: u64) {
        for m in pkts {
            self.record_tso(|v| m.segments().for_each(v), emit_ns, m.tso_request());
        }
    }

    /// The flow and stream offset of an output of `total` bytes whose headers are in
    /// `self.head`; `None` when it is not one of the trace's flows.
    fn parse(&mut self, total: usize) -> Option<(u32, usize)> {
        let h = &self.head;
        let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
        let be32 = |at: usize| u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let l = self.layout;
        let network_ok = if l.v6 {
            be16(ETH_TYPE) == 0x86dd && h[ETH_LEN] >> 4 == 6 && h[ETH_LEN + 6] == 6
        } else {
            be16(ETH_TYPE) == 0x0800 && h[IP_VHL] == 0x45 && h[IP_PROTO] == 6
        };
        let layout_ok =
            total > l.headers_len && network_ok && usize::from(h[l.tcp_doff()] >> 4) * 4 == TCP_LEN;
        if !layout_ok {
            return None;
        }
        // IPv4 total length counts the IP header; IPv6 payload length does not.
        let (len_at, len_of) = if l.v6 {
            (ETH_LEN + 4, total - ETH_LEN - l.l3_len)
        } else {
            (IP_TOTAL_LEN, total - ETH_LEN)
        };
        if usize::from(be16(len_at)) != len_of {
            self.faults.bad_ip_length += 1;
        }
        let flow = self.trace.flow_of_source(be32(l.src_low32()))?;
        let start = self.trace.stream_offset(flow, be32(l.tcp_seq()))?;
        Some((flow, start))
    }

    /// The outcome, or the faults when the engine lost, duplicated or broke packets.
    pub fn finish(mut self) -> Result<Outcome, LedgerError> {
        self.faults.missing = self
            .emitted
            .iter()
            .filter(|&&e| usize::from(e) < self.layout.mss)
            .count() as u64;
        if !self.faults.is_clean() {
            return Err(LedgerError {
                engine: self.engine,
                faults: self.faults,
            });
        }
        let n = self.trace.len().max(1) as f64;
        let us = |ns: u64| ns as f64 / 1e3;
        Ok(Outcome {
            conversion_yield: self.bound_bytes as f64 / self.trace.payload_bytes().max(1) as f64,
            mean_delay_us: self.delay_sum_ns as f64 / n / 1e3,
            p99_delay_us: us(self.delays_ns.value_at_quantile(0.99)),
            max_delay_us: us(self.delays_ns.max()),
            output_packets: self.output_packets,
            segments_per_output: self.trace.len() as f64 / self.output_packets.max(1) as f64,
            packets_per_imtu: self.capped_packets as f64 * self.cap as f64
                / self.trace.payload_bytes().max(1) as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceConfig;

    fn trace() -> Trace {
        Trace::generate(TraceConfig {
            min_packets: 2_000,
            reorder_prob: 0.0,
            ..TraceConfig::new(1, 10.0)
        })
        .unwrap()
    }

    /// Segments `segs` of flow 0 as one merged frame: the first one's headers, every payload,
    /// the IPv4 total length rewritten.
    fn merged(t: &Trace, segs: std::ops::Range<u32>) -> Vec<u8> {
        let mut out = t.frame(t.slot_of(0, segs.start).unwrap())[..HEADERS_LEN].to_vec();
        for s in segs {
            out.extend_from_slice(&t.frame(t.slot_of(0, s).unwrap())[HEADERS_LEN..]);
        }
        let ip_len = (out.len() - ETH_LEN) as u16;
        out[IP_TOTAL_LEN..IP_TOTAL_LEN + 2].copy_from_slice(&ip_len.to_be_bytes());
        out
    }

    #[test]
    fn yield_counts_bytes_as_if_cut_at_the_imtu() {
        let t = trace();
        let l = Ledger::new(&t, "x", 9000, false);
        assert_eq!(l.bound_bytes(1448), 0);
        assert_eq!(
            l.bound_bytes(6 * 1448),
            6 * 1448,
            "8688 + 1448 > 8948: full"
        );
        assert_eq!(l.bound_bytes(5 * 1448), 0);
        // 45 segments: 7 whole caps, and a 2524-byte rest that could take another segment.
        assert_eq!(l.bound_bytes(45 * 1448), 7 * 8948);
        // 12 segments: one cap (8948), and 8428 bytes that cannot take one more.
        assert_eq!(l.bound_bytes(12 * 1448), 12 * 1448);
    }

    #[test]
    fn pass_through_is_zero_yield_zero_delay_and_complete() {
        let t = trace();
        let mut l = Ledger::new(&t, "identity", 9000, true);
        for b in t.bursts() {
            for slot in b.slots.clone() {
                let f = t.frame(slot);
                l.record(|v| v(&f), b.time_ns);
            }
        }
        let o = l.finish().unwrap();
        assert_eq!(o.conversion_yield, 0.0);
        assert_eq!(o.mean_delay_us, 0.0);
        // One packet per segment: 8948 / 1448 packets per iMTU of payload.
        assert!((o.packets_per_imtu - 8948.0 / 1448.0).abs() < 1e-9);
        assert_eq!(o.output_packets as usize, t.len());
    }

    #[test]
    fn ipv6_output_is_read_with_its_own_layout() {
        let t = Trace::generate(TraceConfig {
            min_packets: 2_000,
            reorder_prob: 0.0,
            ipv6: true,
            ..TraceConfig::new(1, 10.0)
        })
        .unwrap();
        let mut l = Ledger::new(&t, "identity-v6", 9000, true);
        // Cap 9000 - 40 - 32 = 8928: six 1428 B segments (8568) cannot take a seventh.
        assert_eq!(l.bound_bytes(6 * 1428), 6 * 1428);
        assert_eq!(l.bound_bytes(5 * 1428), 0);
        for b in t.bursts() {
            for slot in b.slots.clone() {
                let f = t.frame(slot);
                l.record(|v| v(&f), b.time_ns);
            }
        }
        let o = l.finish().unwrap();
        assert_eq!(o.output_packets as usize, t.len());
        assert!((o.packets_per_imtu - 8928.0 / 1428.0).abs() < 1e-9);
        // An IPv4 ledger's reading of the same frames finds none of them.
        let v4 = Trace::generate(TraceConfig {
            min_packets: 2_000,
            ..TraceConfig::new(1, 10.0)
        })
        .unwrap();
        let mut l = Ledger::new(&v4, "v4", 9000, false);
        let f = t.frame(0);
        l.record(|v| v(&f), 0);
        assert_eq!(l.faults.malformed, 1);
    }

    #[test]
    fn lost_duplicated_and_corrupted_packets_are_caught() {
        let t = trace();
        let mut l = Ledger::new(&t, "broken", 9000, true);
        let mut f = t.frame(0);
        l.record(|v| v(&f), t.delivery_ns(0));
        l.record(|v| v(&f), t.delivery_ns(0));
        f[HEADERS_LEN + 5] ^= 1;
        l.record(|v| v(&f[..40]), 0);
        let mut g = t.frame(1);
        g[HEADERS_LEN] ^= 0xff;
        l.record(|v| v(&g), t.delivery_ns(1));
        let e = l.finish().unwrap_err();
        assert_eq!(e.faults.duplicated, 1);
        assert_eq!(e.faults.malformed, 1);
        assert_eq!(e.faults.corrupted, 1);
        assert_eq!(e.faults.missing as usize, t.len() - 2);
    }

    #[test]
    fn merged_output_gives_each_member_its_own_delay() {
        let t = trace();
        let mut l = Ledger::new(&t, "all-in-one", 100_000, true);
        // One flow, no reordering: emit consecutive runs of segments as single packets at the
        // end of the trace, like an engine that never flushes early.
        let end = t.end_ns();
        let mut seg = 0u32;
        while (seg as usize) < t.len() {
            let n = 40.min(t.len() as u32 - seg);
            let out = merged(&t, seg..seg + n);
            l.record(|v| v(&out), end);
            seg += n;
        }
        let o = l.finish().unwrap();
        let mean: f64 = (0..t.len())
            .map(|s| (end - t.delivery_ns(s)) as f64)
            .sum::<f64>()
            / t.len() as f64
            / 1e3;
        assert!((o.mean_delay_us - mean).abs() < 1e-6);
        let mut delays: Vec<u64> = (0..t.len()).map(|s| end - t.delivery_ns(s)).collect();
        delays.sort_unstable();
        let p99 = delays[(delays.len() * 99).div_ceil(100) - 1] as f64 / 1e3;
        assert!(
            (o.p99_delay_us - p99).abs() / p99 < 0.002,
            "{} vs {p99}",
            o.p99_delay_us
        );
        assert!(o.p99_delay_us <= o.max_delay_us);
        assert!(o.segments_per_output > 39.0);
        // Under this ledger's 99,948 B cap each 40-segment output is one packet.
        let cap = 100_000.0 - 52.0;
        let outputs = t.len().div_ceil(40) as f64;
        assert!((o.packets_per_imtu - outputs * cap / t.payload_bytes() as f64).abs() < 1e-9);
    }

    #[test]
    fn an_uncapped_output_counts_as_the_packets_it_would_be_cut_into() {
        let t = trace();
        let mut l = Ledger::new(&t, "gro-like", 9000, false);
        // Runs of 45 segments (65,160 B): 8 packets at the 8948 B cap (7 full, one of 2524 B).
        let mut seg = 0u32;
        let mut outputs = 0u64;
        while (seg as usize) < t.len() {
            let n = 45.min(t.len() as u32 - seg);
            let out = merged(&t, seg..seg + n);
            l.record(|v| v(&out), t.end_ns());
            outputs += (n as usize * 1448).div_ceil(8948) as u64;
            seg += n;
        }
        let o = l.finish().unwrap();
        let expected = outputs as f64 * 8948.0 / t.payload_bytes() as f64;
        assert!((o.packets_per_imtu - expected).abs() < 1e-9);
        // 8 packets for 65,160 B: 8 x 8948 / 65160 = 1.099.
        assert!(
            (1.05..1.15).contains(&o.packets_per_imtu),
            "{}",
            o.packets_per_imtu
        );
    }

    #[test]
    fn an_engine_held_to_the_imtu_faults_on_a_longer_output() {
        let t = trace();
        let mut l = Ledger::new(&t, "capped", 9000, false).enforcing_imtu();
        // Two outputs: segments 0-5 (8688 B, within the 8948 B cap), then 6-12 (10136 B,
        // over it).
        let out = merged(&t, 0..6);
        l.record(|v| v(&out), t.end_ns());
        let rest = merged(&t, 6..13);
        l.record(|v| v(&rest), t.end_ns());
        let err = l.finish().unwrap_err();
        assert_eq!(
            err.faults,
            Faults {
                oversize: 1,
                missing: t.len() as u64 - 13,
                ..Faults::default()
            }
        );
    }

    /// A longer output asking the NIC to cut it at the iMTU (TSO) is no fault: it counts as
    /// the pieces the NIC cuts, like an uncapped one. A TSO request for other pieces is.
    #[test]
    fn a_tso_output_cut_at_the_imtu_is_no_fault() {
        let t = trace();
        let mut l = Ledger::new(&t, "tso", 9000, false).enforcing_imtu();
        let out = merged(&t, 0..13);
        l.record_tso(|v| v(&out), t.end_ns(), Some(8948));
        let wrong = merged(&t, 13..26);
        l.record_tso(|v| v(&wrong), t.end_ns(), Some(9000));
        let err = l.finish().unwrap_err();
        assert_eq!(
            err.faults,
            Faults {
                oversize: 1,
                missing: t.len() as u64 - 26,
                ..Faults::default()
            }
        );
    }
}
