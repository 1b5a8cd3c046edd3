//! PXIO packet merging (SIGCOMM'26 §4.1, §4.2, Appendix A): TCP segments of a flow become
//! iMTU-bound packets, zero-copy, by chaining buffers.
//!
//! # How a segment is handled
//! 1. [`classify`](crate::wire::classify) it. Anything but a plain TCP data segment (UDP, ICMP,
//!    fragments, non-IP, malformed, SYN/RST/URG/CWR, pure ACKs, IPv4 with options, IPv6 with
//!    extension headers) is not merged. When it is a TCP segment of a known flow, the flow's
//!    held items go out first, then the segment, so order is kept (see "Order" below for the
//!    packets whose flow `classify` cannot tell).
//! 2. Find the flow: the RSS hash (or a software Toeplitz hash), verified against the 5-tuple.
//! 3. Merge into a held item: **append** (it starts where an item ends), **prepend** (it ends
//!    where an item starts), then **gap-fill** (the grown item now touches its neighbour: all
//!    join). An append that would overshoot the iMTU is **cut**: the part that fits completes the
//!    item, the rest is held by a refcounted view, not copied (Appendix A, "partial stashing").
//! 4. Items go out when iMTU-bound, when PSH/FIN closes them, at the end of the RX burst, or —
//!    for a flow's incomplete tail item only, when the flow is fast and its yield is low — when
//!    its ETM window expires ([`Merger::poll`]).
//!
//! # Merge rules (at least as strict as Linux `tcp_gro_receive` / `inet_gro_receive`)
//! Segments join only with identical Ethernet header, ACK number, TCP options, TTL and TOS (IPv6:
//! hop limit and traffic class), DF bit, and TCP flags other than PSH/FIN. With DF=0 the IP IDs
//! must increase by one. SYN, RST, URG and CWR segments are never merged. PSH or FIN ends an item
//! and stays on its last byte.
//!
//! Deliberate deviations from Linux, each on the safe side or explained:
//! - IPv4 headers with options are never merged (Linux does the same: it only merges IHL 5).
//! - With DF=1 the IP ID is not checked (Linux accepts incrementing or fixed IDs there); the merged
//!   packet carries the first segment's ID.
//! - A retransmitted or overlapping segment flushes its flow and passes through unmerged.
//! - TCP window: the merged packet carries the first segment's window, like GRO.
//!
//! # Order
//! Every packet of a flow keeps its order relative to that flow's held data: held items are
//! kept sorted by sequence number and always leave as a prefix of that list, and a segment that
//! passes through unmerged first flushes its flow. So a byte may leave before one that arrived
//! earlier only if it lies below it in sequence space (merging can repair reordering, never
//! create it), and the copies of any one sequence number leave in arrival order. Known
//! exceptions, open for a later issue: a packet `classify` gives no flow key (IPv6 with
//! extension headers, malformed frames) passes without flushing its flow, so it can overtake
//! that flow's held data; and a segment appended to an item is checked for overlap only against
//! the items up to that one, not those after it.
//!
//! # What real traffic gets
//! Checked by the property tests (`tests/merge_props.rs`, `tests/on_mbufs.rs`):
//! - **ACK changes** (data and ACKs flowing both ways): never merged across; each ACK value
//!   starts a new item.
//! - **Window changes**: merged; the packet carries the window of the segment holding its first
//!   byte, like GRO.
//! - **TOS/ECN changes** (a CE mark on one segment, a DSCP change): never merged across; a
//!   CE-marked segment leaves in its own packet, so the mark reaches the receiver unchanged.
//! - **Timestamp-option changes**: TCP options must be byte-identical, so never merged across.
//! - **Partial overlaps and retransmissions**, even carrying different bytes: never merged. The
//!   flow's held items leave, then the segment passes through, so the receiver sees every copy
//!   of every byte in the order it would without the engine (see the overlap exception above).
//! - **Chained (LRO-style) inputs**: merged like single buffers, their buffers linked, not
//!   copied, as long as the headers sit in the first buffer; every buffer counts toward
//!   [`MergeConfig::max_segs`].
//! - **VLAN tags** (802.1Q, and 802.1ad + 802.1Q): up to two tags are part of the Ethernet
//!   header in the signature; segments merge only with identical tags, and a re-tagged segment
//!   starts a new item of the same flow.
//! - **IPv4 options**: never merged; the segment flushes its flow and passes through.
//! - **IPv6 extension headers**: never merged; the packet passes through untouched, but without
//!   flushing its flow (the exception above). A flow whose every segment has them is passed
//!   through in order.
//!
//! # Checksums
//! With TX checksum offload granted (and the NIC having verified each input segment), headers are
//! prepared for the NIC. Otherwise the merged TCP checksum is derived from the segments' own
//! checksums without reading the payload, so a corrupt input segment still fails the receiver's
//! check. The one exception is a cut: the segment being cut is checksum-verified by reading its
//! payload, and merged only if it verifies (so corruption can never move into the half that
//! would pass).

mod delay;
mod flow_table;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use hdrhistogram::Histogram;

use crate::buf::{PacketBuf, PacketChain, TxOffload};
use crate::checksum::{self, Sum};
use crate::split::pseudo_header;
use crate::toeplitz::Toeplitz;
use crate::wire::{self, tcp_flags, Class, Headers};

pub use delay::{UnitGammaQuantiles, MAX_K};
use flow_table::{flags, Slot, NIL};
pub use flow_table::{FlowEntry, FlowTable};

/// Bytes of per-flow state (the paper keeps 80 B).
pub const FLOW_ENTRY_BYTES: usize = std::mem::size_of::<FlowEntry>();

/// Adaptive delayed merging settings (Appendix A).
#[derive(Clone, Debug, PartialEq)]
pub struct DelayConfig {
    /// Whether incomplete tail items may wait for more segments at all.
    pub enabled: bool,
    /// Flows slower than this (bits/s) never wait (paper: 1 Gb/s).
    pub rate_threshold_bps: f64,
    /// Flows whose conversion yield is above this never wait (paper: 93 %).
    pub yield_bypass: f64,
    /// The quantile p of Equation 1 (paper: 0.95).
    pub quantile: f64,
    /// No window is longer than this, whatever the model says (ns).
    pub max_window_ns: u64,
    /// Time constant of the per-flow rate average (ns). 100 µs follows a flow's bursts: a TSO
    /// burst of a 54 Mb/s flow arrives at line rate, and waiting for the rest of that burst is
    /// what lifts its yield (with 1 ms the burst is averaged away and the flow never waits).
    pub rate_tau_ns: u64,
}

impl Default for DelayConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            rate_threshold_bps: 1e9,
            yield_bypass: 0.93,
            quantile: 0.95,
            max_window_ns: 500_000,
            rate_tau_ns: 100_000,
        }
    }
}

/// Merge engine settings.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeConfig {
    /// Largest IP packet a merge may produce (the internal MTU; default 9000).
    pub imtu: u16,
    /// Flow-table entries (rounded up to a power of two).
    pub flow_capacity: usize,
    /// Items (separately held runs of segments) per flow; more flushes the flow.
    pub max_items_per_flow: u8,
    /// Items held at once across all flows; when full, new segments pass through unmerged.
    pub max_items: usize,
    /// Most segments a merged packet may have (NICs limit gather TX; DPDK allows 65535).
    pub max_segs: u16,
    /// The port granted IPv4 and TCP checksum offload on transmit, and verifies L4 checksums on
    /// receive: let the NIC do checksums.
    pub checksum_offload: bool,
    /// Adaptive delayed merging.
    pub delay: DelayConfig,
}

impl Default for MergeConfig {
    fn default() -> Self {
        Self {
            imtu: 9000,
            flow_capacity: 16384,
            max_items_per_flow: 8,
            max_items: 65536,
            max_segs: 64,
            checksum_offload: false,
            delay: DelayConfig::default(),
        }
    }
}

/// A configuration value out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("merge config: {key} = {value} is invalid: {allowed}")]
pub struct ConfigError {
    /// The setting.
    pub key: &'static str,
    /// Its value.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

impl MergeConfig {
    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, value: &dyn std::fmt::Display, allowed| ConfigError {
            key,
            value: value.to_string(),
            allowed,
        };
        if self.imtu < 1280 {
            return Err(bad("imtu", &self.imtu, "1280..=65535"));
        }
        if self.flow_capacity == 0 || self.flow_capacity > 1 << 24 {
            return Err(bad("flow_capacity", &self.flow_capacity, "1..=16777216"));
        }
        if self.max_items_per_flow == 0 {
            return Err(bad(
                "max_items_per_flow",
                &self.max_items_per_flow,
                "1..=255",
            ));
        }
        if self.max_segs < 2 {
            return Err(bad("max_segs", &self.max_segs, "2..=65535"));
        }
        if self.max_items == 0 || self.max_items >= NIL as usize {
            return Err(bad("max_items", &self.max_items, "1..4294967295"));
        }
        let d = &self.delay;
        if !(d.quantile > 0.0 && d.quantile < 1.0) {
            return Err(bad(
                "delay.quantile",
                &d.quantile,
                "strictly between 0 and 1",
            ));
        }
        if !(0.0..=1.0).contains(&d.yield_bypass) {
            return Err(bad("delay.yield_bypass", &d.yield_bypass, "0..=1"));
        }
        if d.rate_threshold_bps.is_nan() || d.rate_threshold_bps < 0.0 {
            return Err(bad(
                "delay.rate_threshold_bps",
                &d.rate_threshold_bps,
                ">= 0",
            ));
        }
        if d.rate_tau_ns == 0 {
            return Err(bad("delay.rate_tau_ns", &d.rate_tau_ns, "> 0"));
        }
        Ok(())
    }
}

/// Counters of what the engine did. `packets_in` counts every packet handed to
/// [`Merger::rx`]; `packets_out` every packet it gave back.
#[derive(Clone, Debug)]
pub struct MergeStats {
    /// Packets received.
    pub packets_in: u64,
    /// Packets emitted (merged or passed through).
    pub packets_out: u64,
    /// TCP payload bytes that entered items.
    pub payload_in: u64,
    /// TCP payload bytes that left in iMTU-bound packets.
    pub payload_full: u64,
    /// Segments that joined another (append, prepend or gap-fill).
    pub merges: u64,
    /// Segments cut at the iMTU boundary, their rest held by a refcounted view.
    pub cuts: u64,
    /// Packets passed through without merging (not TCP data, or not eligible).
    pub passthrough: u64,
    /// Malformed packets (passed through untouched, never merged).
    pub malformed: u64,
    /// Segments that failed checksum verification at a cut (passed through for the receiver to
    /// drop).
    pub bad_checksum: u64,
    /// Flows evicted from a full bucket (their items were flushed).
    pub evictions: u64,
    /// Items that waited for an ETM window.
    pub delayed_items: u64,
    /// Items currently held.
    pub held_items: u64,
    /// Added delay per input segment, ns (each item records its mean wait once per segment).
    pub delay_ns: Histogram<u64>,
    /// Longest any segment was held, ns.
    pub max_hold_ns: u64,
}

impl MergeStats {
    fn new() -> Self {
        Self {
            packets_in: 0,
            packets_out: 0,
            payload_in: 0,
            payload_full: 0,
            merges: 0,
            cuts: 0,
            passthrough: 0,
            malformed: 0,
            bad_checksum: 0,
            evictions: 0,
            delayed_items: 0,
            held_items: 0,
            delay_ns: Histogram::new_with_bounds(1, 60_000_000_000, 2)
                .expect("static histogram bounds are valid"),
            max_hold_ns: 0,
        }
    }

    /// Share of merged payload bytes that left in iMTU-bound packets.
    pub fn conversion_yield(&self) -> f64 {
        if self.payload_in == 0 {
            0.0
        } else {
            self.payload_full as f64 / self.payload_in as f64
        }
    }
}

/// A run of contiguous segments of one flow, held as one chained packet.
///
/// Laid out for the append path: the bookkeeping it updates fills the first cache line, the
/// signature it compares the second (the rarely used tail of the TCP options spills into a
/// third).
#[repr(C, align(64))]
struct Item<B: PacketBuf> {
    pkt: Option<B::Chain>,
    /// Sum of the segments' arrival times (ns), for the added-delay average.
    arrival_sum: u64,
    /// Earliest arrival among the segments (ns): the ETM window starts here.
    oldest: u64,
    /// Sequence number of the first payload byte.
    seq: u32,
    payload_len: u32,
    /// One's-complement sum of the payload (software checksum mode).
    payload_sum: Sum,
    next: u32,
    layout: Layout,
    first_id: u16,
    last_id: u16,
    /// Input segments merged.
    segs: u16,
    /// Buffer segments in `pkt` (an input may already be a chain).
    nb_segs: u16,
    /// PSH/FIN of the last segment.
    tail_flags: u8,
    /// Headers must be rewritten before the packet leaves.
    modified: bool,
    sig: MergeSig,
}

impl<B: PacketBuf> Item<B> {
    /// A free slot of the item slab.
    fn vacant() -> Self {
        Self {
            pkt: None,
            seq: 0,
            payload_len: 0,
            layout: Layout::default(),
            sig: MergeSig::EMPTY,
            first_id: 0,
            last_id: 0,
            segs: 0,
            nb_segs: 0,
            tail_flags: 0,
            modified: false,
            payload_sum: Sum::default(),
            arrival_sum: 0,
            oldest: 0,
            next: NIL,
        }
    }

    fn ip_len(&self) -> u32 {
        self.layout.l3_l4_len() + self.payload_len
    }
    fn end_seq(&self) -> u32 {
        self.seq.wrapping_add(self.payload_len)
    }
    fn closed(&self) -> bool {
        self.tail_flags & (tcp_flags::PSH | tcp_flags::FIN) != 0
    }
}

/// Where a mergeable segment's headers lie: its [`Headers`] without the flow key (the flow entry
/// has it), small enough to keep with every item.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Layout {
    /// At most [`MAX_L2`].
    l2_len: u8,
    /// 20 (IPv4 without options) or 40 (IPv6).
    l3_len: u8,
    /// At most 60.
    l4_len: u8,
    v6: bool,
}

impl Layout {
    /// The layout of `hdr`, when it fits (mergeable segments always do).
    fn of(hdr: &Headers) -> Option<Layout> {
        Some(Layout {
            l2_len: u8::try_from(hdr.l2_len).ok()?,
            l3_len: u8::try_from(hdr.l3_len).ok()?,
            l4_len: u8::try_from(hdr.l4_len).ok()?,
            v6: hdr.v6,
        })
    }
    fn l4_offset(&self) -> usize {
        usize::from(self.l2_len) + usize::from(self.l3_len)
    }
    fn hdr_len(&self) -> usize {
        self.l4_offset() + usize::from(self.l4_len)
    }
    fn l3_l4_len(&self) -> u32 {
        u32::from(self.l3_len) + u32::from(self.l4_len)
    }
}

/// The header fields two segments must share to be merged (see the module docs), kept with each
/// item, so matching never touches a held packet's bytes. A new segment is compared with it in
/// place ([`MergeSig::matches`]); only a segment that starts an item has its signature copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct MergeSig {
    ack: u32,
    /// IPv4 TTL or IPv6 hop limit.
    ttl: u8,
    /// IPv4 TOS byte (DSCP and ECN) or IPv6 traffic class.
    tos: u8,
    df: bool,
    /// TCP flags other than PSH and FIN.
    flags: u8,
    l2_len: u8,
    opt_len: u8,
    /// The Ethernet header, VLAN tags included (at most two).
    l2: [u8; MAX_L2],
    /// The TCP options.
    options: [u8; MAX_TCP_OPTIONS],
}

/// Ethernet header with two VLAN tags.
const MAX_L2: usize = 22;
/// TCP options are at most 40 bytes.
const MAX_TCP_OPTIONS: usize = 40;

impl MergeSig {
    const EMPTY: MergeSig = MergeSig {
        ack: 0,
        ttl: 0,
        tos: 0,
        df: false,
        flags: 0,
        l2_len: 0,
        opt_len: 0,
        l2: [0; MAX_L2],
        options: [0; MAX_TCP_OPTIONS],
    };

    /// The signature of `seg`, whose headers are at the start of `frame`.
    fn of(seg: &Segment, frame: &[u8]) -> MergeSig {
        let (l2, options) = seg.sig_bytes(frame);
        let mut sig = MergeSig {
            ack: seg.ack,
            ttl: seg.ttl,
            tos: seg.tos,
            df: seg.df,
            flags: seg.merge_flags(),
            l2_len: seg.layout.l2_len,
            opt_len: options.len() as u8,
            ..MergeSig::EMPTY
        };
        sig.l2[..l2.len()].copy_from_slice(l2);
        sig.options[..options.len()].copy_from_slice(options);
        sig
    }

    /// Whether `seg` (headers at the start of `frame`) has exactly this signature: the same as
    /// `MergeSig::of(seg, frame) == *self`, without building it.
    #[inline]
    fn matches(&self, seg: &Segment, frame: &[u8]) -> bool {
        if self.ack != seg.ack
            || self.ttl != seg.ttl
            || self.tos != seg.tos
            || self.df != seg.df
            || self.flags != seg.merge_flags()
            || self.l2_len != seg.layout.l2_len
            || usize::from(self.opt_len) + TCP_HEADER_LEN != usize::from(seg.layout.l4_len)
        {
            return false;
        }
        let (l2, options) = seg.sig_bytes(frame);
        short_eq(&self.l2[..l2.len()], l2) && short_eq(&self.options[..options.len()], options)
    }
}

/// `a == b` for two equally long header slices of a few dozen bytes, eight bytes at a time and
/// without a `memcmp` call.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut diff = 0u64;
    for (p, q) in (&mut x).zip(&mut y) {
        let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().expect("chunks of eight"));
        diff |= word(p) ^ word(q);
    }
    for (p, q) in x.remainder().iter().zip(y.remainder()) {
        diff |= u64::from(p ^ q);
    }
    diff == 0
}

/// The TCP header without options.
const TCP_HEADER_LEN: usize = wire::tcp::field::HEADER_LEN;

/// What the engine needs of a TCP segment beyond its flow: where its headers lie and the fields
/// merging reads (the bytes of the signature stay in the packet until an item needs a copy).
#[derive(Clone, Copy, Debug)]
struct Segment {
    layout: Layout,
    /// IP packet length.
    ip_len: u16,
    payload_len: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    ttl: u8,
    tos: u8,
    df: bool,
    ip_id: u16,
    /// Payload sum derived from the segment's own checksum (software checksum mode).
    payload_sum: Sum,
}

impl Segment {
    /// The TCP flags that must match (all but PSH and FIN).
    fn merge_flags(&self) -> u8 {
        self.flags & !(tcp_flags::PSH | tcp_flags::FIN)
    }

    /// The Ethernet header and the TCP options, from the segment's `frame`.
    fn sig_bytes<'a>(&self, frame: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        let l4 = self.layout.l4_offset();
        (
            &frame[..usize::from(self.layout.l2_len)],
            &frame[l4 + TCP_HEADER_LEN..self.layout.hdr_len()],
        )
    }

    fn hdr_len(&self) -> usize {
        self.layout.hdr_len()
    }

    /// Length of the frame without Ethernet padding.
    fn frame_len(&self) -> usize {
        usize::from(self.layout.l2_len) + usize::from(self.ip_len)
    }
}

/// A flow-table entry remembered from the previous segment (see [`Merger::rx`]).
#[derive(Clone, Copy, Debug)]
struct RecentFlow {
    flow: u32,
    /// The NIC hash of that segment (`None`: it was hashed in software, from its key).
    nic_hash: Option<u32>,
}

/// The merge engine, one per worker (run to completion, no locks).
pub struct Merger<B: PacketBuf> {
    cfg: MergeConfig,
    pool: B::Pool,
    toeplitz: Toeplitz,
    flows: FlowTable,
    items: Vec<Item<B>>,
    free_items: Vec<u32>,
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    timer_capacity: usize,
    touched: Vec<u32>,
    /// The flow of the last TCP segment, and the NIC hash it came with: the next segment of the
    /// same flow (TSO bursts arrive back to back) needs no hash and no lookup.
    recent: Option<RecentFlow>,
    quantiles: UnitGammaQuantiles,
    /// Rate threshold in bytes/ns.
    rate_threshold: f32,
    /// 1 / rate time constant, per ns.
    inv_tau: f32,
    stats: MergeStats,
}

impl<B: PacketBuf> Merger<B> {
    /// An engine with `cfg`, allocating new headers (for cut segments) from `pool`.
    pub fn new(cfg: MergeConfig, pool: B::Pool) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let flows = FlowTable::new(cfg.flow_capacity);
        let timer_capacity = flows.capacity() * 2;
        Ok(Self {
            quantiles: UnitGammaQuantiles::new(cfg.delay.quantile),
            rate_threshold: (cfg.delay.rate_threshold_bps / 8e9) as f32,
            inv_tau: (1.0 / cfg.delay.rate_tau_ns as f64) as f32,
            toeplitz: Toeplitz::default(),
            // Every slot exists (and its memory is touched) up front: the hot path never grows
            // the slab, and never takes a page fault on it.
            items: (0..cfg.max_items).map(|_| Item::vacant()).collect(),
            free_items: (0..cfg.max_items as u32).rev().collect(),
            timers: BinaryHeap::with_capacity(timer_capacity),
            timer_capacity,
            touched: Vec::with_capacity(flows.capacity()),
            recent: None,
            flows,
            cfg,
            pool,
            stats: MergeStats::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MergeConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &MergeStats {
        &self.stats
    }

    /// The pool new header buffers come from.
    pub fn pool(&self) -> &B::Pool {
        &self.pool
    }

    /// Flows in the table.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Merges one RX burst: every packet of `pkts` is merged, held or passed to `out`; then the
    /// burst is settled: items that are not a delay-eligible tail go to `out` too. `now` is the
    /// burst's arrival time in ns (from the injectable clock).
    pub fn rx_burst(&mut self, pkts: impl IntoIterator<Item = B>, now: u64, out: &mut Vec<B>) {
        for pkt in pkts {
            self.rx(pkt, now, out);
        }
        self.settle(now, out);
    }

    /// Merges one packet. Call [`settle`](Self::settle) after the burst it belongs to (or use
    /// [`rx_burst`](Self::rx_burst)).
    pub fn rx(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        self.stats.packets_in += 1;
        let class = wire::classify(pkt.head(), pkt.len());
        let hdr = match class {
            Class::Tcp(h) => h,
            Class::Malformed(_) => {
                self.stats.malformed += 1;
                return self.pass(pkt, out);
            }
            _ => return self.pass(pkt, out),
        };
        let nic_hash = pkt.rss_hash();
        let recent = self.recent_flow(nic_hash, &hdr.key);
        let Some(seg) = self.segment(&pkt, &hdr) else {
            // Not mergeable: flush the flow's items first so the order on the wire is kept.
            let flow = recent.or_else(|| self.find(self.hash(nic_hash, &hdr.key), &hdr.key));
            if let Some(flow) = flow {
                self.flush_flow(flow, now, out);
            }
            return self.pass(pkt, out);
        };
        let flow = match recent {
            Some(flow) => flow,
            None => self.flow_for(self.hash(nic_hash, &hdr.key), &hdr.key, now, out),
        };
        self.recent = Some(RecentFlow { flow, nic_hash });
        self.update_flow_on_arrival(flow, &seg, now);
        self.merge(flow, pkt, seg, now, out);
        self.touch(flow);
    }

    /// Settles the flows the last burst touched: everything but a delay-eligible incomplete tail
    /// item goes out; such a tail gets (or keeps) its ETM deadline.
    pub fn settle(&mut self, now: u64, out: &mut Vec<B>) {
        let touched = std::mem::take(&mut self.touched);
        for &flow in &touched {
            self.flows.get_mut(flow).flags &= !flags::TOUCHED;
            self.settle_flow(flow, now, out);
        }
        self.touched = touched;
        self.touched.clear();
    }

    /// Emits every delayed tail item whose window has passed by `now`.
    pub fn poll(&mut self, now: u64, out: &mut Vec<B>) {
        while let Some(&Reverse((due, flow))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            let e = self.flows.get_mut(flow);
            if !e.occupied() || e.scheduled != due {
                continue; // stale: the flow was rescheduled, evicted or flushed
            }
            e.scheduled = 0;
            let deadline = e.deadline;
            if deadline == 0 {
                continue;
            }
            if deadline <= now {
                self.flush_flow(flow, now, out);
            } else {
                self.schedule(flow, deadline);
            }
        }
    }

    /// The earliest pending ETM deadline, if any: when a poll loop with nothing to receive
    /// should call [`poll`](Self::poll) next. It may be a deadline that was since moved (a poll
    /// then does nothing), never a later one than the truth.
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.peek().map(|Reverse((due, _))| *due)
    }

    /// Emits everything held (shutdown, or a caller that wants no state left).
    pub fn flush_all(&mut self, now: u64, out: &mut Vec<B>) {
        let flows: Vec<u32> = self.flows.occupied().collect();
        for flow in flows {
            self.flush_flow(flow, now, out);
        }
        self.timers.clear();
    }

    // ---- per-packet steps ----

    fn pass(&mut self, pkt: B, out: &mut Vec<B>) {
        self.stats.passthrough += 1;
        self.emit_raw(pkt, out);
    }

    fn emit_raw(&mut self, pkt: B, out: &mut Vec<B>) {
        self.stats.packets_out += 1;
        out.push(pkt);
    }

    /// The flow-table hash of a packet: the NIC's, else a software Toeplitz hash of `key`.
    fn hash(&self, nic_hash: Option<u32>, key: &wire::FlowKey) -> u32 {
        nic_hash.unwrap_or_else(|| key.rss_hash(&self.toeplitz))
    }

    /// The previous segment's flow entry, when this packet (NIC hash `nic_hash`) belongs to it:
    /// the entry still holds exactly `key`, and the hash is the one that found it (the software
    /// hash is a function of the key). That is the entry a lookup would return.
    #[inline]
    fn recent_flow(&self, nic_hash: Option<u32>, key: &wire::FlowKey) -> Option<u32> {
        let recent = self.recent?;
        let e = self.flows.get(recent.flow);
        (recent.nic_hash == nic_hash && e.occupied() && e.key == *key).then_some(recent.flow)
    }

    fn find(&self, hash: u32, key: &wire::FlowKey) -> Option<u32> {
        self.flows.find(hash, key)
    }

    fn flow_for(&mut self, hash: u32, key: &wire::FlowKey, now: u64, out: &mut Vec<B>) -> u32 {
        match self.flows.lookup(hash, key, now) {
            Slot::Hit(i) | Slot::New(i) => i,
            Slot::Evict(i) => {
                self.stats.evictions += 1;
                self.flush_flow(i, now, out);
                // An evicted flow may already be on this burst's touched list; the flag must
                // survive the reset so the entry is not listed twice.
                let touched = self.flows.get(i).flags & flags::TOUCHED;
                self.flows.claim(i, key, now);
                self.flows.get_mut(i).flags |= touched;
                i
            }
        }
    }

    /// Reads what merging needs, or `None` when the segment must not be merged.
    fn segment(&self, pkt: &B, hdr: &Headers) -> Option<Segment> {
        let layout = Layout::of(hdr)?;
        if usize::from(layout.l2_len) > MAX_L2 {
            return None;
        }
        // `classify` validated every header length: the views below cannot run off the end.
        let bytes = &pkt.head()[..layout.hdr_len()];
        let l3 = &bytes[layout.l4_offset() - usize::from(layout.l3_len)..layout.l4_offset()];
        let (ip_id, df, ttl, tos) = if hdr.v6 {
            let ip = wire::Ipv6Packet::new_unchecked(l3);
            (0, true, ip.hop_limit(), ip.traffic_class())
        } else {
            let ip = wire::Ipv4Packet::new_unchecked(l3);
            if ip.header_len() != wire::ipv4::field::HEADER_LEN {
                return None; // IPv4 options: never merged, like Linux
            }
            (
                ip.ident(),
                ip.dont_frag(),
                ip.ttl(),
                ip.dscp() << 2 | ip.ecn(),
            )
        };
        let tcp_bytes = &bytes[layout.l4_offset()..];
        let tcp = wire::TcpPacket::new_unchecked(tcp_bytes);
        let flags = tcp.flags();
        let never = tcp_flags::SYN | tcp_flags::RST | tcp_flags::URG | tcp_flags::CWR;
        if flags & never != 0 || hdr.payload_len == 0 {
            return None;
        }
        let payload_sum = if self.cfg.checksum_offload {
            if !pkt.l4_checksum_verified() {
                return None;
            }
            Sum::default()
        } else {
            let tcp_len = hdr.l4_len + hdr.payload_len;
            let pseudo = pseudo_header(bytes, hdr, u32::from(tcp_len));
            // ~checksum covers pseudo header + TCP header (checksum field as 0) + payload.
            let header = Sum::of(tcp_bytes).sub(Sum(u32::from(tcp.checksum())));
            checksum::covered_sum(tcp.checksum())
                .sub(pseudo)
                .sub(header)
        };
        Some(Segment {
            layout,
            ip_len: hdr.ip_len,
            payload_len: hdr.payload_len,
            seq: tcp.seq_number(),
            ack: tcp.ack_number(),
            flags,
            ttl,
            tos,
            df,
            ip_id,
            payload_sum,
        })
    }

    fn update_flow_on_arrival(&mut self, flow: u32, seg: &Segment, now: u64) {
        let inv_tau = self.inv_tau;
        let e = self.flows.get_mut(flow);
        let dt = now.saturating_sub(e.last_seen);
        e.rate = delay::update_rate(e.rate, dt, u32::from(seg.ip_len), inv_tau);
        e.last_seen = now;
        e.mss = e.mss.max(seg.payload_len);
    }

    fn touch(&mut self, flow: u32) {
        let e = self.flows.get_mut(flow);
        if e.flags & flags::TOUCHED == 0 {
            e.flags |= flags::TOUCHED;
            self.touched.push(flow);
        }
    }

    /// Places `pkt` into the flow's items.
    fn merge(&mut self, flow: u32, mut pkt: B, seg: Segment, now: u64, out: &mut Vec<B>) {
        // Drop Ethernet padding after the IP packet: it must not end up inside a merged payload.
        let frame_len = seg.frame_len();
        if pkt.len() > frame_len && !pkt.truncate(frame_len) {
            return self.pass(pkt, out);
        }
        self.stats.payload_in += u64::from(seg.payload_len);
        let s_start = seg.seq;
        let s_end = seg.seq.wrapping_add(u32::from(seg.payload_len));

        let mut prev = NIL;
        let mut cur = self.flows.get(flow).items;
        while cur != NIL {
            let it = &self.items[cur as usize];
            let (i_start, i_end) = (it.seq, it.end_seq());
            if seq_lt(s_start, i_end) && seq_lt(i_start, s_end) {
                // Overlap: a retransmission or duplicate. Never merge it.
                self.flush_flow(flow, now, out);
                return self.pass(pkt, out);
            }
            if s_start == i_end && !it.closed() && self.compatible(cur, &pkt, &seg, true) {
                return self.append(flow, cur, pkt, seg, now, out);
            }
            if s_end == i_start
                && seg.flags & (tcp_flags::PSH | tcp_flags::FIN) == 0
                && self.compatible(cur, &pkt, &seg, false)
                && it.ip_len() + u32::from(seg.payload_len) <= u32::from(self.cfg.imtu)
            {
                self.prepend(cur, pkt, seg, now);
                let grown = if prev != NIL && self.try_join(flow, prev) {
                    prev
                } else {
                    cur
                };
                return self.emit_if_done(flow, grown, now, out);
            }
            if seq_lt(s_end, i_start) || s_end == i_start {
                break; // insert before `cur`
            }
            prev = cur;
            cur = self.items[cur as usize].next;
        }
        self.insert_item(flow, prev, pkt, seg, now, out, false);
    }

    /// Whether `seg` may join item `idx` (as its successor when `append`, else predecessor).
    fn compatible(&self, idx: u32, pkt: &B, seg: &Segment, append: bool) -> bool {
        let it = &self.items[idx as usize];
        if it.layout != seg.layout
            || usize::from(it.nb_segs) + pkt.num_segs() > self.max_segs()
            || !it.sig.matches(seg, pkt.head())
        {
            return false;
        }
        if !seg.layout.v6 && !seg.df {
            let next_id = if append {
                seg.ip_id == it.last_id.wrapping_add(1)
            } else {
                seg.ip_id.wrapping_add(1) == it.first_id
            };
            if !next_id {
                return false;
            }
        }
        true
    }

    fn append(
        &mut self,
        flow: u32,
        idx: u32,
        mut pkt: B,
        seg: Segment,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let imtu = u32::from(self.cfg.imtu);
        let room = imtu.saturating_sub(self.items[idx as usize].ip_len());
        let len = u32::from(seg.payload_len);
        if room >= len {
            self.join_segment(idx, pkt, &seg, seg.payload_sum, seg.flags, now);
            return self.after_growth(flow, idx, now, out);
        }
        if room == 0 {
            self.emit_through(flow, idx, now, out);
            return self.merge(flow, pkt, seg, now, out);
        }
        // Cut: `room` bytes complete this item, the rest is held by a view.
        let Some((head_sum, rest_sum)) = self.cut_sums(&pkt, &seg, room) else {
            self.stats.bad_checksum += 1;
            self.emit_through(flow, idx, now, out);
            return self.pass(pkt, out);
        };
        let Some(rest) = self.remainder(&pkt, &seg, room) else {
            // No buffer for the rest's header: no cut; the item goes, the segment starts anew.
            self.emit_through(flow, idx, now, out);
            let prev = self.last_item_before(flow, seg.seq);
            return self.insert_item(flow, prev, pkt, seg, now, out, false);
        };
        let cut = pkt.truncate(seg.hdr_len() + room as usize);
        debug_assert!(cut, "room < payload length");
        self.stats.cuts += 1;
        // The first part carries no PSH/FIN: they belong to the last byte, now in `rest`.
        self.join_segment(idx, pkt, &seg, head_sum, 0, now);
        self.emit_through(flow, idx, now, out);
        let mut rest_seg = seg;
        rest_seg.seq = seg.seq.wrapping_add(room);
        rest_seg.payload_len = (len - room) as u16;
        rest_seg.ip_len = seg.ip_len - room as u16;
        rest_seg.payload_sum = rest_sum;
        let prev = self.last_item_before(flow, rest_seg.seq);
        self.insert_item(flow, prev, rest, rest_seg, now, out, true);
    }

    /// Payload sums of the first `room` bytes and of the rest, after verifying the segment's
    /// checksum by reading its payload. `None` when it does not verify.
    fn cut_sums(&self, pkt: &B, seg: &Segment, room: u32) -> Option<(Sum, Sum)> {
        if self.cfg.checksum_offload {
            return Some((Sum::default(), Sum::default()));
        }
        let start = seg.hdr_len();
        let end = start + usize::from(seg.payload_len);
        let cut = start + room as usize;
        let (mut first, mut whole) = (Sum::default(), Sum::default());
        let mut pos = 0usize;
        pkt.for_each_segment(|s| {
            let (s_start, s_end) = (pos, pos + s.len());
            pos = s_end;
            for (lo, hi, acc_first) in [(start, cut, true), (cut, end, false)] {
                let (a, b) = (lo.max(s_start), hi.min(s_end));
                if a < b {
                    // Parity of where these bytes sit in the payload decides their alignment.
                    let part = Sum::of(&s[a - s_start..b - s_start]);
                    let part = if (a - start) % 2 == 1 {
                        part.swapped()
                    } else {
                        part
                    };
                    whole = whole.add(part);
                    if acc_first {
                        first = first.add(part);
                    }
                }
            }
        });
        if !sums_equal(whole, seg.payload_sum) {
            return None;
        }
        // The rest's own sum, aligned to its first byte.
        let rest = whole.sub(first);
        let rest = if room % 2 == 1 { rest.swapped() } else { rest };
        Some((first, rest))
    }

    /// A new packet for the bytes of `pkt` past the first `room` payload bytes: a copy of its
    /// headers (sequence number advanced) chained to a zero-copy view of the rest.
    fn remainder(&self, pkt: &B, seg: &Segment, room: u32) -> Option<B> {
        let hdr_len = seg.hdr_len();
        let mut head = B::alloc_with(&self.pool, &pkt.head()[..hdr_len])?;
        let bytes = head.head_mut()?;
        let tcp_at = seg.layout.l4_offset();
        let mut tcp = wire::TcpPacket::new_checked(&mut bytes[tcp_at..hdr_len]).ok()?;
        tcp.set_seq_number(seg.seq.wrapping_add(room));
        let rest_len = usize::from(seg.payload_len) - room as usize;
        let view = pkt.share_range(hdr_len + room as usize, rest_len, &self.pool)?;
        head.chain(view).ok()?;
        Some(head)
    }

    /// Appends segment `pkt` (payload sum `sum`, tail flags `tail_flags`) to item `idx`.
    fn join_segment(
        &mut self,
        idx: u32,
        mut pkt: B,
        seg: &Segment,
        sum: Sum,
        tail_flags: u8,
        now: u64,
    ) {
        let stripped = pkt.adj(seg.hdr_len());
        debug_assert!(
            stripped,
            "classify checked the headers are in the first segment"
        );
        let seg_len = pkt.len() as u32;
        let pkt_segs = pkt.num_segs() as u16;
        let it = &mut self.items[idx as usize];
        it.nb_segs += pkt_segs;
        let head = it.pkt.as_mut().expect("held items have a packet");
        // `compatible` checked the segment count, so chaining cannot fail.
        if head.append(pkt).is_err() {
            unreachable_chain();
        }
        it.payload_sum = concat_sum(it.payload_sum, it.payload_len, sum);
        it.payload_len += seg_len;
        it.last_id = seg.ip_id;
        it.segs += 1;
        it.tail_flags = tail_flags & (tcp_flags::PSH | tcp_flags::FIN);
        it.modified = true;
        it.arrival_sum += now;
        it.oldest = it.oldest.min(now);
        self.stats.merges += 1;
    }

    fn prepend(&mut self, idx: u32, pkt: B, seg: Segment, now: u64) {
        let sig = MergeSig::of(&seg, pkt.head());
        let it = &mut self.items[idx as usize];
        let mut old = it.pkt.take().expect("held items have a packet");
        let stripped = old.adj(it.layout.hdr_len());
        debug_assert!(stripped);
        it.nb_segs += pkt.num_segs() as u16;
        let mut pkt = B::Chain::new(pkt);
        // `compatible` checked the segment count, so chaining cannot fail.
        if pkt.append_chain(old).is_err() {
            unreachable_chain();
        }
        it.payload_sum = concat_sum(seg.payload_sum, u32::from(seg.payload_len), it.payload_sum);
        it.pkt = Some(pkt);
        it.seq = seg.seq;
        it.payload_len += u32::from(seg.payload_len);
        it.layout = seg.layout;
        it.sig = sig;
        it.first_id = seg.ip_id;
        it.segs += 1;
        it.modified = true;
        it.arrival_sum += now;
        it.oldest = it.oldest.min(now);
        self.stats.merges += 1;
    }

    /// After item `idx` grew: emit it when closed or iMTU-bound, else try to join its successor.
    fn after_growth(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        self.try_join(flow, idx);
        self.emit_if_done(flow, idx, now, out);
    }

    /// Emits item `idx` (and those before it) when PSH/FIN closed it or it reached the iMTU.
    /// An item that is merely too full for one more whole segment stays: the next segment will
    /// be cut to fill it exactly (partial stashing).
    fn emit_if_done(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        let it = &self.items[idx as usize];
        if it.closed() || it.ip_len() >= u32::from(self.cfg.imtu) {
            self.emit_through(flow, idx, now, out);
        }
    }

    /// Gap-fill: joins item `idx` with its successor when they touch, fit and match; returns
    /// whether they were joined.
    fn try_join(&mut self, flow: u32, idx: u32) -> bool {
        let next = self.items[idx as usize].next;
        if next == NIL {
            return false;
        }
        let (a, b) = (&self.items[idx as usize], &self.items[next as usize]);
        let fits = a.ip_len() + b.payload_len <= u32::from(self.cfg.imtu);
        // An item's signature holds the DF bit of its first segment, whose headers it carries.
        let ids_ok = b.layout.v6 || b.sig.df || b.first_id == a.last_id.wrapping_add(1);
        if a.end_seq() != b.seq || a.closed() || !fits || !ids_ok {
            return false;
        }
        if a.layout != b.layout
            || usize::from(a.nb_segs + b.nb_segs) > self.max_segs()
            || a.sig != b.sig
        {
            return false;
        }
        let mut tail = self.items[next as usize].pkt.take().expect("held");
        let stripped = tail.adj(self.items[next as usize].layout.hdr_len());
        debug_assert!(stripped);
        let head = self.items[idx as usize].pkt.as_mut().expect("held");
        if head.append_chain(tail).is_err() {
            unreachable_chain();
        }
        let b = &self.items[next as usize];
        let (b_len, b_sum, b_last, b_segs, b_nb, b_flags, b_arr, b_oldest, b_next) = (
            b.payload_len,
            b.payload_sum,
            b.last_id,
            b.segs,
            b.nb_segs,
            b.tail_flags,
            b.arrival_sum,
            b.oldest,
            b.next,
        );
        let a = &mut self.items[idx as usize];
        a.payload_sum = concat_sum(a.payload_sum, a.payload_len, b_sum);
        a.payload_len += b_len;
        a.last_id = b_last;
        a.segs += b_segs;
        a.nb_segs += b_nb;
        a.tail_flags = b_flags;
        a.arrival_sum += b_arr;
        a.oldest = a.oldest.min(b_oldest);
        a.modified = true;
        a.next = b_next;
        self.free_item(next);
        let e = self.flows.get_mut(flow);
        e.n_items -= 1;
        self.stats.merges += 1;
        true
    }

    /// The segment limit: the configured one, within what the buffer type can chain.
    fn max_segs(&self) -> usize {
        usize::from(self.cfg.max_segs).min(B::MAX_SEGS)
    }

    fn last_item_before(&self, flow: u32, seq: u32) -> u32 {
        let mut prev = NIL;
        let mut cur = self.flows.get(flow).items;
        while cur != NIL && seq_lt(self.items[cur as usize].seq, seq) {
            prev = cur;
            cur = self.items[cur as usize].next;
        }
        prev
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_item(
        &mut self,
        flow: u32,
        mut prev: u32,
        pkt: B,
        seg: Segment,
        now: u64,
        out: &mut Vec<B>,
        modified: bool,
    ) {
        if self.flows.get(flow).n_items >= self.cfg.max_items_per_flow {
            self.flush_flow(flow, now, out);
            prev = NIL;
        }
        if self.free_items.is_empty() {
            // Every slot is in use: this flow's items go, and the segment passes unmerged.
            self.flush_flow(flow, now, out);
            return self.pass(pkt, out);
        }
        let nb_segs = pkt.num_segs() as u16;
        let sig = MergeSig::of(&seg, pkt.head());
        let item = Item {
            pkt: Some(B::Chain::new(pkt)),
            seq: seg.seq,
            payload_len: u32::from(seg.payload_len),
            layout: seg.layout,
            sig,
            first_id: seg.ip_id,
            last_id: seg.ip_id,
            segs: 1,
            nb_segs,
            tail_flags: seg.flags & (tcp_flags::PSH | tcp_flags::FIN),
            modified,
            payload_sum: seg.payload_sum,
            arrival_sum: now,
            oldest: now,
            next: NIL,
        };
        let idx = self.alloc_item(item);
        let e = self.flows.get_mut(flow);
        if prev == NIL {
            self.items[idx as usize].next = e.items;
            e.items = idx;
        } else {
            let after = self.items[prev as usize].next;
            self.items[idx as usize].next = after;
            self.items[prev as usize].next = idx;
        }
        e.n_items += 1;
        self.stats.held_items += 1;
        // A new item may close a gap with its successor, or be complete on its own.
        self.after_growth(flow, idx, now, out);
    }

    /// Takes a free slot; the caller checked there is one.
    fn alloc_item(&mut self, item: Item<B>) -> u32 {
        let i = self
            .free_items
            .pop()
            .expect("insert_item checked for a free slot");
        self.items[i as usize] = item;
        i
    }

    fn free_item(&mut self, idx: u32) {
        let it = &mut self.items[idx as usize];
        it.pkt = None;
        it.next = NIL;
        self.free_items.push(idx);
        self.stats.held_items -= 1;
    }

    // ---- emission ----

    /// Emits the flow's items up to and including `idx`, in sequence order.
    fn emit_through(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        loop {
            let head = self.flows.get(flow).items;
            if head == NIL {
                return;
            }
            self.emit_head(flow, now, out);
            if head == idx {
                return;
            }
        }
    }

    /// Emits every item of the flow.
    fn flush_flow(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        while self.flows.get(flow).items != NIL {
            self.emit_head(flow, now, out);
        }
        self.flows.get_mut(flow).deadline = 0;
    }

    fn emit_head(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        let idx = self.flows.get(flow).items;
        let mss = u32::from(self.flows.get(flow).mss);
        let it = &mut self.items[idx as usize];
        let mut pkt = it
            .pkt
            .take()
            .expect("held items have a packet")
            .into_packet();
        let full = it.ip_len() + mss > u32::from(self.cfg.imtu);
        let weight = it.ip_len() as f32 / f32::from(self.cfg.imtu);
        let (payload, segs, arrival_sum, oldest, next) =
            (it.payload_len, it.segs, it.arrival_sum, it.oldest, it.next);
        if it.modified && !finalize(&mut pkt, it, self.cfg.checksum_offload, &self.pool) {
            // Headers could not be rewritten (no buffer for a private copy): the packet would be
            // wrong on the wire, so it is dropped and counted.
            self.stats.bad_checksum += 1;
            drop(pkt);
        } else {
            self.stats.packets_out += 1;
            out.push(pkt);
        }
        if full {
            self.stats.payload_full += u64::from(payload);
        }
        let mean_arrival = arrival_sum / u64::from(segs.max(1));
        let wait = now.saturating_sub(mean_arrival).max(1);
        let _ = self.stats.delay_ns.record_n(wait, u64::from(segs));
        self.stats.max_hold_ns = self.stats.max_hold_ns.max(now.saturating_sub(oldest));
        let e = self.flows.get_mut(flow);
        e.items = next;
        e.n_items -= 1;
        e.yield_avg = delay::update_yield(e.yield_avg, full, weight);
        if next == NIL {
            e.deadline = 0;
        }
        self.free_item(idx);
    }

    // ---- adaptive delay ----

    fn settle_flow(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
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
        let it = &self.items[tail as usize];
        let d = &self.cfg.delay;
        let eligible = d.enabled
            && !it.closed()
            && e.rate >= self.rate_threshold
            && f64::from(e.yield_avg) <= d.yield_bypass;
        if !eligible {
            return self.flush_flow(flow, now, out);
        }
        let pmtu = u32::from(e.mss) + it.layout.l3_l4_len();
        let etm = self
            .quantiles
            .etm_ns(
                u32::from(self.cfg.imtu),
                it.ip_len(),
                pmtu,
                f64::from(e.rate),
            )
            .min(d.max_window_ns as f64);
        // Anchored at the item's oldest segment: no segment waits longer than the window.
        let deadline = (it.oldest.min(now) + etm as u64).max(1);
        let deadline = if e.deadline == 0 {
            deadline
        } else {
            deadline.min(e.deadline)
        };
        if deadline <= now {
            return self.flush_flow(flow, now, out);
        }
        if e.deadline == 0 {
            self.stats.delayed_items += 1;
        }
        self.flows.get_mut(flow).deadline = deadline;
        let scheduled = self.flows.get(flow).scheduled;
        if scheduled == 0 || deadline < scheduled {
            if self.timers.len() >= self.timer_capacity {
                return self.flush_flow(flow, now, out);
            }
            self.schedule(flow, deadline);
        }
    }

    fn schedule(&mut self, flow: u32, deadline: u64) {
        self.flows.get_mut(flow).scheduled = deadline;
        self.timers.push(Reverse((deadline, flow)));
    }
}

/// `a < b` in TCP sequence space.
#[inline]
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The sum of payload A (length `a_len`) followed by payload B.
#[inline]
fn concat_sum(a: Sum, a_len: u32, b: Sum) -> Sum {
    a.add(if a_len % 2 == 1 { b.swapped() } else { b })
}

/// One's-complement sums are equal when they fold to the same value (0 and 0xffff both mean
/// zero).
fn sums_equal(a: Sum, b: Sum) -> bool {
    let norm = |s: Sum| match s.fold() {
        0xffff => 0,
        v => v,
    };
    norm(a) == norm(b)
}

/// Chaining fails only past the segment limit, which every merge checks first.
#[cold]
fn unreachable_chain() -> ! {
    unreachable!("segment count was checked before chaining")
}

/// Rewrites the headers of a merged packet: lengths, flags, IP ID stays the first segment's, and
/// checksums (or the pseudo-header seed for NIC offload).
fn finalize<B: PacketBuf>(pkt: &mut B, it: &Item<B>, offload: bool, pool: &B::Pool) -> bool {
    let layout = it.layout;
    if pkt.head_mut().is_none() && !privatize_head(pkt, layout.hdr_len(), pool) {
        return false;
    }
    let ip_len = it.ip_len();
    let l2 = usize::from(layout.l2_len);
    let l3 = usize::from(layout.l3_len);
    let end = layout.hdr_len();
    let bytes = pkt.head_mut().expect("head made private above");
    {
        let ip_bytes = &mut bytes[l2..l2 + l3];
        if layout.v6 {
            let Ok(mut ip) = wire::Ipv6Packet::new_checked(ip_bytes) else {
                return false;
            };
            ip.set_payload_len((ip_len - 40) as u16);
        } else {
            let Ok(mut ip) = wire::Ipv4Packet::new_checked(ip_bytes) else {
                return false;
            };
            ip.set_total_len(ip_len as u16);
            if offload {
                ip.set_checksum(0);
            } else {
                ip.fill_checksum();
            }
        }
    }
    let pseudo = tcp_pseudo_header(bytes, layout, ip_len - u32::from(layout.l3_len));
    let Ok(mut tcp) = wire::TcpPacket::new_checked(&mut bytes[l2 + l3..end]) else {
        return false;
    };
    let flags = tcp.flags() & !(tcp_flags::PSH | tcp_flags::FIN) | it.tail_flags;
    tcp.set_flags(flags);
    if offload {
        tcp.set_checksum(pseudo.fold());
    } else {
        tcp.set_checksum(0);
        let sum = pseudo
            .add(Sum::of(&bytes[l2 + l3..end]))
            .add(it.payload_sum);
        let Ok(mut tcp) = wire::TcpPacket::new_checked(&mut bytes[l2 + l3..end]) else {
            return false;
        };
        tcp.set_checksum(sum.checksum());
    }
    if offload {
        pkt.request_tx_offload(TxOffload {
            l2_len: layout.l2_len,
            l3_len: u16::from(layout.l3_len),
            l4_len: layout.l4_len,
            ipv4: !layout.v6,
            ip_checksum: !layout.v6,
            tcp_checksum: true,
            ..TxOffload::default()
        });
    }
    true
}

/// The TCP pseudo-header sum of a held packet (headers at the start of `frame`) whose TCP
/// segment is `l4_len` bytes.
fn tcp_pseudo_header(frame: &[u8], layout: Layout, l4_len: u32) -> Sum {
    let l3 = &frame[usize::from(layout.l2_len)..];
    // Held packets' headers were validated by `classify` on arrival.
    if layout.v6 {
        let ip = wire::Ipv6Packet::new_unchecked(l3);
        checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), wire::ip_proto::TCP, l4_len)
    } else {
        let ip = wire::Ipv4Packet::new_unchecked(l3);
        checksum::pseudo_header_v4(
            ip.src_addr(),
            ip.dst_addr(),
            wire::ip_proto::TCP,
            l4_len as u16,
        )
    }
}

/// Replaces a shared first segment's headers with a private copy so they can be rewritten.
fn privatize_head<B: PacketBuf>(pkt: &mut B, hdr_len: usize, pool: &B::Pool) -> bool {
    let Some(mut head) = B::alloc_with(pool, &pkt.head()[..hdr_len]) else {
        return false;
    };
    let rest_len = pkt.len() - hdr_len;
    if rest_len > 0 {
        let Some(rest) = pkt.share_range(hdr_len, rest_len, pool) else {
            return false;
        };
        if head.chain(rest).is_err() {
            return false;
        }
    }
    *pkt = head;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_items_append_bookkeeping_fits_one_cache_line() {
        type MbufItem = Item<dpdk::Mbuf>;
        assert_eq!(std::mem::align_of::<MbufItem>(), 64);
        assert_eq!(std::mem::offset_of!(MbufItem, sig), 64);
        // The signature's scalars, Ethernet header and the first TCP options share a line.
        assert!(std::mem::offset_of!(MergeSig, options) + 12 <= 64);
    }
}
