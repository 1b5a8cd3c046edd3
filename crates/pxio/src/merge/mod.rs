//! PXIO packet merging (SIGCOMM'26 §4.1, §4.2, Appendix A): TCP segments of a flow become
//! iMTU-bound packets, zero-copy, by chaining buffers.
//!
//! # How a segment is handled
//! 1. [`classify`](crate::wire::classify) it. Anything but a plain TCP data segment (UDP, ICMP,
//!    fragments, non-IP, malformed, SYN/RST/URG/CWR, pure ACKs, IPv4 with options, IPv6 with
//!    extension headers) is not merged. When it belongs to a known flow, the flow's held items go
//!    out first, then the packet, so order is kept; for packets `classify` gives no flow (IPv6
//!    extension headers, a first fragment, a bad TCP data offset) [`wire::flow_of`] reads it.
//! 2. Find the flow: a seeded hash of the 5-tuple picks a bucket of the flow table, and the
//!    5-tuple is compared in full (not the NIC's RSS hash: see `flow_table` for why). A burst
//!    is classified and hashed first, then each flow's segments are taken together
//!    ([`Merger::rx_burst`]), so a flow is looked up once per burst. With the NIC's RSS hash,
//!    a segment that continues its flow's last item skips steps 1 and 2: the hash names a
//!    flow, and one masked compare of the whole header against the item's confirms it (the
//!    fast path, `fast`).
//! 3. Merge into a held item: **append** (it starts where an item ends), **prepend** (it ends
//!    where an item starts), then **gap-fill** (the grown item now touches its neighbour: all
//!    join). An append that would overshoot the iMTU is **cut**: the part that fits completes the
//!    item, the rest is held by a refcounted view, not copied (Appendix A, "partial stashing").
//!    A flow's further segments in a burst that simply continue its only item, with the NIC's
//!    checksum verdicts, take the run path (`run`): one masked compare of the whole header
//!    against the item's first segment instead of taking the segment apart; anything else
//!    takes the general path, which decides the same way.
//! 4. Items go out when iMTU-bound, when PSH/FIN closes them, at the end of the RX burst, or —
//!    for a flow's incomplete tail item only, when the flow is fast and its yield is low — when
//!    its ETM window expires ([`Merger::poll`]).
//!
//! **With TSO on transmit** ([`MergeConfig::tso_max_len`]), as the paper's PXIO ("After
//! merging, PM applies TSO"): an item's bound is not the iMTU but the most whole iMTU-sized
//! pieces a TSO request may carry (62,636 payload bytes for IPv4 with timestamps at 9000 B),
//! and a packet past the iMTU leaves with a TSO request at the iMTU (`tso_segsz` = iMTU less
//! its headers, the TCP checksum seeded without the length), for the NIC to cut. Every packet
//! on the wire still fits the iMTU, and the engine cuts a segment only at that bound: one cut
//! per seven 9000 B packets instead of one per packet. A tail past the iMTU waits whole for
//! its last piece, in that piece's own ETM window (anchored where its first byte arrived,
//! estimated from the item's arrival span), never past the longest window after the item's
//! oldest segment.
//!
//! # Merge rules (at least as strict as Linux `tcp_gro_receive` / `inet_gro_receive`)
//! Segments join only with identical Ethernet header, ACK number, TCP options, TTL and TOS (IPv6:
//! hop limit, traffic class and flow label), DF bit, and TCP flags other than PSH/FIN. With DF=0 the IP IDs
//! must increase by one. SYN, RST, URG and CWR segments are never merged. PSH or FIN ends an item
//! and stays on its last byte.
//!
//! Deliberate deviations from Linux, each on the safe side or explained:
//! - IPv4 headers with options are never merged (Linux does the same: it only merges IHL 5).
//! - With DF=1 the IP ID is not checked (Linux accepts incrementing or fixed IDs there); the merged
//!   packet carries the first segment's ID.
//! - A retransmitted or overlapping segment flushes its flow and passes through unmerged.
//! - IPv6 flow label: segments with different labels are not merged, as in Linux GRO
//!   (`ipv6_gro_receive` compares version and flow label). A sender changes its label to move
//!   the flow to another path (Linux does on a retransmission timeout); each packet keeps the
//!   label its segments carried, so what the receiver (or a load balancer after us) sees is
//!   unchanged.
//! - TCP window: the merged packet carries the window of the segment holding its last byte,
//!   where Linux GRO keeps the first segment's (`tcp_gro_receive` only ORs PSH/FIN into the held
//!   header). All merged segments carry one ACK number, so a receiver taking them one by one
//!   updates its send window from each in turn and ends with the last one's (RFC 9293
//!   §3.10.7.4: the segment with the highest sequence number wins); the first one's would be
//!   stale, holding back a window that opened meanwhile (or, when it shrank, offering more
//!   than the peer now accepts).
//!
//! # Order
//! Every packet of a flow keeps its order relative to that flow's held data: held items are
//! kept sorted by sequence number and always leave as a prefix of that list, and a segment that
//! passes through unmerged first flushes its flow. So a byte may leave before one that arrived
//! earlier only if it lies below it in sequence space (merging can repair reordering, never
//! create it), and the copies of any one sequence number leave in arrival order: a segment is
//! checked for overlap against every held item of its flow (the items before the place it
//! would join, and the one after it), wherever it starts or ends. The one exception: a packet
//! whose ports cannot be read at all (a later fragment, a header cut short) cannot be tied to a
//! flow and passes as is.
//!
//! # What real traffic gets
//! Checked by the property tests (`tests/merge_props.rs`, `tests/on_mbufs.rs`):
//! - **ACK changes** (data and ACKs flowing both ways): never merged across; each ACK value
//!   starts a new item.
//! - **Window changes**: merged; the packet carries the window of the segment holding its last
//!   byte (the most recent advertisement).
//! - **IPv6 flow-label changes**: never merged across; each label starts a new item.
//! - **TOS/ECN changes** (a CE mark on one segment, a DSCP change): never merged across; a
//!   CE-marked segment leaves in its own packet, so the mark reaches the receiver unchanged.
//! - **Timestamp-option changes**: TCP options must be byte-identical, so never merged across.
//! - **Partial overlaps and retransmissions**, even carrying different bytes: never merged. The
//!   flow's held items leave, then the segment passes through, so the receiver sees every copy
//!   of every byte in the order it would without the engine.
//! - **Chained (LRO-style) inputs**: merged like single buffers, their buffers linked, not
//!   copied, as long as the headers sit in the first buffer; every buffer counts toward
//!   [`MergeConfig::max_segs`].
//! - **VLAN tags** (802.1Q, and 802.1ad + 802.1Q): up to two tags are part of the Ethernet
//!   header in the signature; segments merge only with identical tags, and a re-tagged segment
//!   starts a new item of the same flow.
//! - **IPv4 options**: never merged; the segment flushes its flow and passes through.
//! - **IPv6 extension headers**: never merged (as Linux GRO); the flow's held items leave first,
//!   then the packet, untouched.
//!
//! # Checksums
//! A segment is merged only if its checksums verify, so what the receiver would reject stays
//! rejected, and costs only itself:
//! - **IPv4 header checksum**: always verified, by the NIC's verdict where the buffer carries
//!   one ([`PacketBuf::ip_csum_verdict`]: `RTE_MBUF_F_RX_IP_CKSUM_GOOD`/`BAD`), else by
//!   summing the 20 bytes. A bad one: the segment is not merged
//!   (its merged packet would get a fresh, valid header), passes through untouched after its
//!   flow's held items, and is counted ([`MergeStats::bad_ip_checksum`]).
//! - **TCP checksum**: the NIC's verdict where the buffer carries one
//!   ([`PacketBuf::l4_csum_verdict`]: DPDK's
//!   `RTE_MBUF_F_RX_L4_CKSUM_GOOD`/`BAD`), trusted both ways; otherwise verified in software
//!   by reading the payload ([`Sum::of`](crate::checksum::Sum::of), about 30 GB/s on cached
//!   data here, some 40 ns per 1448 B segment). A bad segment is not merged, passes through
//!   untouched after its flow's held items, and is counted ([`MergeStats::bad_checksum`]); the
//!   flow's later segments merge as before. Verifying each segment on its own is what keeps
//!   errors from cancelling: two corrupted segments whose errors cancel in the ones'-complement
//!   sum (+1 and −1 in one 16-bit column) each fail, so they never make a merged packet that
//!   verifies.
//!
//! Once verified, a segment's payload sum follows from its own checksum field, so the merged
//! packet's TCP checksum is computed from the segments' sums and the rewritten header, without
//! reading the payload again; a cut reads only the shorter of its two parts. With TX checksum
//! offload granted ([`MergeConfig::checksum_offload`]) headers are prepared for the NIC instead.
//! Segments the engine never merges (IPv6 extension headers, fragments, malformed frames) pass
//! through unverified and untouched: the receiver checks them as it would without the engine.
//!
//! # Layout
//! - `config`: [`MergeConfig`], [`DelayConfig`] and their validation.
//! - `stats`: [`MergeStats`].
//! - `segment`: what is read from one input segment.
//! - `item`: the held item, its header layout and merge signature, and the item slab.
//! - `place`: append, prepend, gap-fill and cut.
//! - `run`: the run path, where a flow's further segments in a burst join its item after one
//!   masked header compare.
//! - `fast`: the fast path, the run path's test before any parse, on the flow the NIC's RSS
//!   hash points to.
//! - `emit`: emission, header rewriting and checksums.
//! - `delay`: the ETM model and the scheduling of delayed tail items.
//! - `flow_table`: [`FlowTable`], the per-flow state.

mod config;
mod delay;
mod emit;
mod fast;
mod flow_table;
mod item;
mod place;
mod run;
mod segment;
mod stats;
mod timers;

use crate::buf::PacketBuf;
use crate::wire::{self, ip_proto, Class, FlowKey, Headers, Parsed};

pub use config::{ConfigError, DelayConfig, MergeConfig};
use delay::Etm;
pub use delay::{UnitGammaQuantiles, MAX_K};
use flow_table::{flags, Slot};
pub use flow_table::{FlowEntry, FlowTable};
use item::{Item, Layout};
pub use segment::{ip_header_ok, tcp_checksums_ok};
use segment::{Refusal, Segment};
pub use stats::MergeStats;

/// Bytes of per-flow state (the paper keeps 80 B).
pub const FLOW_ENTRY_BYTES: usize = std::mem::size_of::<FlowEntry>();

/// Packets [`Merger::rx_burst`] classifies and groups at a time (a longer burst is taken in
/// chunks of this many).
pub const BURST_CHUNK: usize = 64;

/// Slots of the table `rx_burst` keeps of the last packet of each RSS hash in a chunk.
const LAST_SLOTS: usize = 1024;

/// No packet (end of a group's list in [`Merger::rx_burst`]).
pub(super) const NO_PKT: u8 = u8::MAX;

/// A packet of the burst being merged, with its parse and its place in its flow's group.
pub(super) struct Pending<B> {
    pkt: Option<B>,
    parsed: Parsed,
    /// The flow-table hash of its key (TCP only).
    hash: u32,
    /// The next packet of the same flow in this chunk, or [`NO_PKT`].
    next: u8,
}

/// The `n` lowest bits set (all 64 from 64 on).
#[inline]
fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// A chunk taken one packet at a time by a caller ([`Merger::begin_stream`]).
struct StreamChunk {
    /// Each packet's RSS hash (where bit `i` of `with_rss` is set).
    rss: [u32; BURST_CHUNK],
    /// The flow the fast index named for each packet when the chunk began.
    hints: [u32; BURST_CHUNK],
    with_rss: u64,
    /// Packets in the chunk.
    len: usize,
    /// Segments the fast path appended (counted at the end).
    joins: u64,
    /// Fast merges and cuts before the chunk.
    joined_before: u64,
}

impl Default for StreamChunk {
    fn default() -> Self {
        Self {
            rss: [0; BURST_CHUNK],
            hints: [flow_table::NIL; BURST_CHUNK],
            with_rss: 0,
            len: 0,
            joins: 0,
            joined_before: 0,
        }
    }
}

/// The merge engine, one per worker (run to completion, no locks).
pub struct Merger<B: PacketBuf> {
    cfg: MergeConfig,
    pool: B::Pool,
    /// Seed of the flow-table hash (see [`flow_table::key_hash`]).
    hash_seed: u64,
    flows: FlowTable,
    items: Vec<Item<B>>,
    free_items: Vec<u32>,
    touched: Vec<u32>,
    /// The flow of the last TCP segment [`rx`](Self::rx) took: the next segment of the same
    /// flow (TSO bursts arrive back to back) needs no hash and no lookup.
    recent: Option<u32>,
    /// The burst being merged ([`rx_burst`](Self::rx_burst)); kept to reuse its memory.
    pending: Vec<Pending<B>>,
    /// The chunk of the burst being read ([`rx_burst`](Self::rx_burst)); kept to reuse its
    /// memory.
    chunk: Vec<B>,
    /// The parses of `chunk`'s packets, when the caller handed them over
    /// ([`rx_burst_parsed`](Self::rx_burst_parsed)): the general path takes them instead of
    /// parsing again.
    chunk_parses: Vec<Parsed>,
    /// The last packet of the chunk with each RSS hash (modulo the table's size), see
    /// `stream_or_group`. Never cleared: only the slots of the current chunk's hashes are
    /// read, and the chunk's own prologue wrote each of those.
    chunk_last: Box<[u8; LAST_SLOTS]>,
    /// Whether [`rx_burst`](Self::rx_burst) takes its next chunk in arrival order through
    /// the fast path (`stream_chunk`) rather than grouped by flow (`group_chunk`): chosen
    /// after each chunk by how many of its segments continued an item.
    stream_next: bool,
    /// Flow entries by RSS hash, for the fast path (see `fast`).
    fast: fast::FastIndex,
    /// The chunk a caller takes one packet at a time ([`begin_stream`](Self::begin_stream)).
    stream: Box<StreamChunk>,
    /// The ETM scheduler: deadline heap and model constants.
    etm: Etm,
    /// The header bytes the run path compares, per header layout (see `run`).
    run_masks: run::RunMasks,
    stats: MergeStats,
    /// A run of equal added delays not yet in `stats.delay_ns`: (wait ns, segments).
    delay_run: (u64, u64),
    /// The longest an item may grow (IP bytes), by its IP + TCP header length (see
    /// [`item_limit`](Self::item_limit)).
    limits: [u32; LIMIT_SLOTS],
}

/// [`Merger::item_limit`] for IP + TCP headers of `l34` bytes: `l34` plus the most whole pieces
/// of `imtu - l34` payload bytes that fit `tso_max_len`, or the iMTU without TSO.
fn item_limit_for(cfg: &MergeConfig, l34: u32) -> u32 {
    let imtu = u32::from(cfg.imtu);
    if cfg.tso_max_len == 0 || l34 >= imtu {
        return imtu;
    }
    let segsz = imtu - l34;
    let pieces = (u32::from(cfg.tso_max_len).saturating_sub(l34) / segsz).max(1);
    l34 + pieces * segsz
}

/// How the NIC cuts a packet past the iMTU ([`Merger::tso_pieces`]).
#[derive(Clone, Copy, Debug)]
struct TsoPieces {
    /// Payload bytes per piece: the iMTU less the headers.
    segsz: u32,
    /// Whole pieces (at least one).
    whole: u32,
    /// Payload bytes of the last, short piece; 0 when every piece is whole.
    last: u32,
}

/// Slots of [`Merger::limits`]: IP + TCP headers are at most 40 + 60 bytes.
const LIMIT_SLOTS: usize = 128;

impl<B: PacketBuf> Merger<B> {
    /// An engine with `cfg`, allocating new headers (for cut segments) from `pool`. The flow
    /// table's hash is seeded at random, so which flows share a bucket cannot be chosen from
    /// outside.
    pub fn new(cfg: MergeConfig, pool: B::Pool) -> Result<Self, ConfigError> {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
        Self::with_hash_seed(cfg, pool, seed)
    }

    /// [`new`](Self::new) with a given flow-table hash seed: the same seed places the same
    /// flows in the same buckets (fuzzing and reproducible tests).
    pub fn with_hash_seed(
        cfg: MergeConfig,
        pool: B::Pool,
        hash_seed: u64,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let flows = FlowTable::new(cfg.flow_capacity);
        Ok(Self {
            etm: Etm::new(&cfg.delay, flows.capacity()),
            hash_seed,
            // Every slot exists (and its memory is touched) up front: the hot path never grows
            // the slab, and never takes a page fault on it.
            items: (0..cfg.max_items).map(|_| Item::vacant()).collect(),
            free_items: (0..cfg.max_items as u32).rev().collect(),
            touched: Vec::with_capacity(flows.capacity()),
            recent: None,
            fast: fast::FastIndex::new(flows.capacity()),
            stream: Box::default(),
            run_masks: run::RunMasks::new(),
            pending: Vec::with_capacity(BURST_CHUNK),
            chunk: Vec::with_capacity(BURST_CHUNK),
            chunk_parses: Vec::with_capacity(BURST_CHUNK),
            chunk_last: Box::new([u8::MAX; LAST_SLOTS]),
            stream_next: true,
            flows,
            pool,
            stats: MergeStats::new(),
            delay_run: (0, 0),
            limits: std::array::from_fn(|l34| item_limit_for(&cfg, l34 as u32)),
            cfg,
        })
    }

    /// The longest IP packet an item with headers `layout` may grow to: the iMTU, or with TSO
    /// (`MergeConfig::tso_max_len`) the most whole iMTU-sized pieces a TSO request may carry.
    #[inline(always)]
    fn item_limit(&self, layout: Layout) -> u32 {
        limit_of(&self.limits, layout)
    }

    /// The largest IP packet a merge may make of segments with `l34` bytes of IP and TCP
    /// headers: the iMTU, or with TSO the most whole iMTU-sized pieces a TSO request carries. A
    /// coalesced segment (LRO, GRO) cut to it beforehand joins the engine whole.
    pub fn largest_item(&self, l34: u32) -> u32 {
        item_limit_for(&self.cfg, l34)
    }

    /// How the NIC cuts an item with headers `layout` and `payload_len` payload bytes (TSO), or
    /// `None` when it leaves as it is: without TSO, or within the iMTU. The one place that
    /// decides whether an item is sent with a TSO request. Out of line: the burst loop it would
    /// otherwise join (through the settle) grew by 8 instructions per packet.
    #[inline(never)]
    fn tso_pieces(&self, layout: Layout, payload_len: u32) -> Option<TsoPieces> {
        let imtu = u32::from(self.cfg.imtu);
        let l34 = layout.l3_l4_len();
        if self.cfg.tso_max_len == 0 || l34 + payload_len <= imtu {
            return None;
        }
        // Past the iMTU, so the headers leave room for a piece and the item holds one whole.
        let segsz = imtu - l34;
        Some(TsoPieces {
            segsz,
            whole: payload_len / segsz,
            last: payload_len % segsz,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MergeConfig {
        &self.cfg
    }

    /// The counters. The delay histogram is complete after each [`settle`](Self::settle),
    /// [`poll`](Self::poll) and [`flush_all`](Self::flush_all) (and so after each
    /// [`rx_burst`](Self::rx_burst)); between single [`rx`](Self::rx) calls it may lag.
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

    /// Flow-table entries: every flow entry number ([`offer_fast`](Self::offer_fast)) is
    /// below it.
    pub fn flow_capacity(&self) -> usize {
        self.flows.capacity()
    }

    /// Merges one RX burst: every packet of `pkts` is merged, held or passed to `out`; then the
    /// burst is settled: items that are not a delay-eligible tail go to `out` too. `now` is the
    /// burst's arrival time in ns (from the injectable clock).
    ///
    /// The burst is taken in chunks of [`BURST_CHUNK`], each one of two ways:
    /// - **in arrival order, through the fast path**, when the packets carry the NIC's RSS
    ///   hash: a segment that continues its flow's last item joins it (or is cut into it at
    ///   the iMTU) before it is parsed, the flow found by the hash and confirmed by a masked
    ///   compare of the whole header (see `fast`); any other packet is parsed and merged at
    ///   once;
    /// - **grouped by flow**, as vector dataplanes do (VPP, DPDK's l3fwd), for packets without
    ///   a hash and after a chunk in which few segments continued an item: every packet is
    ///   classified and hashed first, then the packets of each flow are taken together, in
    ///   their arrival order, so a flow is looked up once per chunk.
    ///
    /// Either way each flow's packets keep their order, and a packet that may belong to any
    /// flow (a fragment, IPv6 extension headers, a malformed frame: see "Order" in the module
    /// docs) is a barrier no packet is moved across. Packets of different flows may leave in
    /// another order than they came.
    pub fn rx_burst(&mut self, pkts: impl IntoIterator<Item = B>, now: u64, out: &mut Vec<B>) {
        let mut pkts = pkts.into_iter();
        loop {
            let full = if self.stream_next {
                self.stream_or_group(&mut pkts.by_ref().map(|pkt| (pkt, None)), now, out)
            } else {
                let merges = self.stats.merges;
                let (n, hashed) = self.group_chunk(pkts.by_ref().take(BURST_CHUNK), now, out);
                // Merges were to be had: the fast path would take most of them.
                self.stream_next = hashed && (self.stats.merges - merges) * 2 >= n as u64;
                n == BURST_CHUNK
            };
            if !full {
                break;
            }
        }
        self.settle(now, out);
    }

    /// Takes the next chunk of `pkts` through the fast path when its packets carry RSS hashes
    /// (else grouped); returns whether the chunk was full.
    fn stream_or_group(
        &mut self,
        pkts: &mut impl Iterator<Item = (B, Option<Parsed>)>,
        now: u64,
        out: &mut Vec<B>,
    ) -> bool {
        let mut chunk = std::mem::take(&mut self.chunk);
        let mut parses = std::mem::take(&mut self.chunk_parses);
        parses.clear();
        for (pkt, parsed) in pkts.take(BURST_CHUNK) {
            if let Some(parsed) = parsed {
                parses.push(parsed);
            }
            chunk.push(pkt);
        }
        let n = chunk.len();
        let mut rss = [0u32; BURST_CHUNK];
        let mut hints = [flow_table::NIL; BURST_CHUNK];
        let with_rss = prologue(
            &self.fast,
            &self.flows,
            &mut self.chunk_last,
            &chunk,
            &mut rss,
            &mut hints,
        );
        // Every packet's parse, or none (a caller hands over all or nothing).
        let parses_ok = parses.len() == n;
        if with_rss == 0 {
            self.stream_next = false;
            if parses_ok {
                self.group_parsed_chunk(chunk.drain(..).zip(parses.drain(..)), now, out);
            } else {
                self.group_chunk(chunk.drain(..), now, out);
            }
        } else {
            let joined = self.stats.fast_merges + self.stats.cuts;
            let parses = if parses_ok { &parses[..] } else { &[] };
            self.stream_chunk(chunk.drain(..), &rss, &hints, parses, with_rss, now, out);
            self.choose_next(joined, n);
        }
        self.chunk = chunk;
        self.chunk_parses = parses;
        n == BURST_CHUNK
    }

    /// After a chunk taken in arrival order, of `n` packets, while `joined` segments had
    /// continued an item before it: when few of its segments continued an item (finely
    /// interleaved flows), the grouped path, which looks every flow up ahead, serves the next
    /// chunk better.
    #[inline(always)]
    fn choose_next(&mut self, joined: u64, n: usize) {
        self.stream_next = (self.stats.fast_merges + self.stats.cuts - joined) * 4 >= n as u64;
    }

    /// Begins taking `chunk` (at most [`BURST_CHUNK`] packets of an RX burst) one packet at a
    /// time, in arrival order, for a caller that looks at each packet the fast path refuses
    /// before the general path does (a gateway tracking connections, say). Returns false when
    /// the chunk is better taken whole ([`rx_burst`](Self::rx_burst),
    /// [`rx_burst_parsed`](Self::rx_burst_parsed)): the port gives no RSS hash, or the last
    /// chunk's segments seldom continued an item.
    ///
    /// When it returns true, the caller offers each packet `i` of `chunk` (by its index, in
    /// order) to [`offer_fast`](Self::offer_fast); a packet refused there that is to be merged
    /// goes to [`rx_streamed`](Self::rx_streamed) with the same index before the next packet
    /// is offered; then [`end_stream`](Self::end_stream), and at the end of the burst
    /// [`settle`](Self::settle). Merging is exactly what [`rx_burst`](Self::rx_burst) does with
    /// the same packets; a packet the caller keeps from the engine is simply not merged.
    pub fn begin_stream(&mut self, chunk: &[B]) -> bool {
        if !self.stream_next || chunk.is_empty() || chunk.len() > BURST_CHUNK {
            return false;
        }
        let s = &mut *self.stream;
        let with_rss = prologue(
            &self.fast,
            &self.flows,
            &mut self.chunk_last,
            chunk,
            &mut s.rss,
            &mut s.hints,
        );
        s.with_rss = with_rss;
        s.len = chunk.len();
        s.joins = 0;
        s.joined_before = self.stats.fast_merges + self.stats.cuts;
        if with_rss == 0 {
            self.stream_next = false;
        }
        with_rss != 0
    }

    /// Offers packet `i` of the chunk [`begin_stream`](Self::begin_stream) began to the fast
    /// path: a segment that continues its flow's last item joins it (or is cut into it) without
    /// being parsed, and its flow is returned (see [`flow_key`](Self::flow_key)); any other
    /// packet is given back untouched.
    #[inline]
    pub fn offer_fast(&mut self, i: usize, pkt: B, now: u64, out: &mut Vec<B>) -> Result<u32, B> {
        if !self.stream_hashed(i) {
            return Err(pkt);
        }
        let (hash, hint) = (self.stream.rss[i], self.stream.hints[i]);
        let (joined, flow) = self.fast_join(pkt, hash, hint, now, out)?;
        if let fast::Joined::Appended = joined {
            self.stream.joins += 1;
        }
        Ok(flow)
    }

    /// Merges packet `i` of the streamed chunk, which the fast path refused, on the general
    /// path, with its parse. A packet may be handed in as several (a coalesced segment cut in
    /// pieces, in order): each takes the same index.
    pub fn rx_streamed(&mut self, i: usize, pkt: B, parsed: &Parsed, now: u64, out: &mut Vec<B>) {
        let s = &self.stream;
        let hashed = self.stream_hashed(i);
        let hint = if hashed { s.hints[i] } else { flow_table::NIL };
        let alone = hashed && usize::from(self.chunk_last[s.rss[i] as usize % LAST_SLOTS]) == i;
        self.rx_general(pkt, hint, alone, Some(parsed), now, out);
    }

    /// The flow entry the fast index named for packet `i` of the streamed chunk, if that entry
    /// holds `key` now: the entry [`rx_streamed`](Self::rx_streamed) will take the packet
    /// into without hashing, whose line was fetched with the chunk. A caller that keeps state
    /// per flow entry (beside [`offer_fast`](Self::offer_fast)'s flows) finds it so for a
    /// packet the fast path refused, with no lookup of its own.
    #[inline]
    pub fn streamed_flow(&self, i: usize, key: &FlowKey) -> Option<u32> {
        if !self.stream_hashed(i) {
            return None;
        }
        let hint = self.stream.hints[i];
        (hint != flow_table::NIL && self.flows.holds(hint, key)).then_some(hint)
    }

    /// The flow entries the fast index named for the streamed chunk's packets, in chunk order,
    /// once for each run of packets it named the same entry for (a flow's segments come in
    /// runs: a TSO burst's, or one flow alone); a packet without a hash, or for which it named
    /// none, gives none. Hints, not answers:
    /// an entry may hold another flow by the time its packet is taken ([`streamed_flow`]
    /// checks). A caller that keeps state per flow entry prefetches it with them, while the
    /// engine's own entries for the chunk are on their way.
    ///
    /// [`streamed_flow`]: Self::streamed_flow
    pub fn stream_hints(&self) -> impl Iterator<Item = u32> + '_ {
        let s = &*self.stream;
        // The hashed packets' places, lowest first, as bits, and each hint compared with the
        // one before (the sentinel `NIL` stands for none yet, and is never yielded): a few
        // instructions per packet, where an enumerated, filtered walk took twenty.
        let mut hashed = s.with_rss & low_bits(s.len);
        let mut last = flow_table::NIL;
        std::iter::from_fn(move || {
            while hashed != 0 {
                let i = hashed.trailing_zeros() as usize;
                hashed &= hashed - 1;
                let hint = s.hints.get(i).copied().unwrap_or(flow_table::NIL);
                if hint != last && hint != flow_table::NIL {
                    last = hint;
                    return Some(hint);
                }
            }
            None
        })
    }

    /// Whether packet `i` of the streamed chunk is in it and carries an RSS hash (so its
    /// `rss` and `hints` places hold its own).
    #[inline]
    fn stream_hashed(&self, i: usize) -> bool {
        let s = &self.stream;
        i < s.len && s.with_rss & (1 << i) != 0
    }

    /// Ends the chunk [`begin_stream`](Self::begin_stream) began: counts the segments the fast
    /// path appended, and chooses how the next chunk is taken.
    pub fn end_stream(&mut self) {
        let (joins, before, len) = (
            self.stream.joins,
            self.stream.joined_before,
            self.stream.len,
        );
        self.stream.len = 0;
        self.stream.joins = 0;
        self.count_fast_joins(joins);
        if len > 0 {
            self.choose_next(before, len);
        }
    }

    /// Whether the engine holds nothing: no item of any flow, so a packet it passes now
    /// overtakes nothing (see [`pass_if_idle`](Self::pass_if_idle)).
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.free_items.len() == self.cfg.max_items
    }

    /// Passes `pkt`, a TCP segment without payload (a pure ACK: never merged), straight to
    /// `out` when the engine holds nothing, and counts it exactly as [`rx`](Self::rx) would
    /// (its IPv4 header checksum included). With nothing held no flow has items that must go
    /// first, so the flow lookup `rx` makes could change nothing: the ACKs an outside receiver
    /// sends for an upload cost no lookup. Gives the packet back otherwise. `hdr`: its headers.
    #[inline]
    pub fn pass_if_idle(&mut self, pkt: B, hdr: &Headers, out: &mut Vec<B>) -> Result<(), B> {
        if hdr.payload_len != 0 || !self.is_idle() {
            return Err(pkt);
        }
        self.stats.packets_in += 1;
        // Without payload the only refusal `rx` counts is a bad IPv4 header checksum: none
        // to look for in IPv6, nor where the NIC vouched for the header.
        let vouched = hdr.v6 || pkt.ip_csum_verdict() == Some(true);
        if !vouched && matches!(self.segment(&pkt, hdr), Err(Refusal::BadIpChecksum)) {
            self.stats.bad_ip_checksum += 1;
        }
        self.pass(pkt, out);
        Ok(())
    }

    /// A bare acknowledgement of the flow `key` (a TCP segment without payload, which the
    /// caller read from `pkt`'s own bytes: `wire::plain_ack`), over IPv6 or over IPv4 with a
    /// header the NIC vouched for: handled exactly as [`rx`](Self::rx) handles it, without the
    /// parse. Such a segment is never merged; what the engine holds of its flow is sent first
    /// (so the order on the wire is kept), then it, counted as passed. With nothing held at
    /// all, not even the flow is looked up. Gives the packet back, untouched, when its IPv4
    /// header was not vouched for (`rx` checks it). A segment with payload handed in here would
    /// only pass unmerged, after its flow's items.
    #[inline]
    pub fn pass_bare_ack(
        &mut self,
        pkt: B,
        key: &FlowKey,
        now: u64,
        out: &mut Vec<B>,
    ) -> Result<(), B> {
        if !key.v6 && pkt.ip_csum_verdict() != Some(true) {
            return Err(pkt);
        }
        self.stats.packets_in += 1;
        self.release_key(key, now, out);
        self.pass(pkt, out);
        Ok(())
    }

    /// Sends everything the engine holds of the flow `key` to `out` now, before a packet of
    /// that flow the caller sends on without the engine (a connection it no longer merges), so
    /// that the packet overtakes none of the flow's held data. With nothing held at all, not
    /// even the flow is looked up.
    pub fn release_key(&mut self, key: &FlowKey, now: u64, out: &mut Vec<B>) {
        if self.is_idle() {
            return;
        }
        let hash = flow_table::key_hash(key, self.hash_seed);
        if let Some(flow) = self.flows.find(hash, key) {
            self.flush_flow(flow, now, out);
        }
    }

    /// The 5-tuple of flow entry `flow` (as [`offer_fast`](Self::offer_fast) returns it).
    pub fn flow_key(&self, flow: u32) -> Option<&FlowKey> {
        (flow < self.flows.capacity() as u32).then(|| &self.flows.get(flow).key)
    }

    /// Sends everything flow entry `flow` holds to `out` now: its next packets start afresh (a
    /// caller that learns the flow must no longer be merged, say).
    pub fn release_flow(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        if flow < self.flows.capacity() as u32 {
            self.flush_flow(flow, now, out);
        }
    }

    /// Merges a chunk whose packets carry the NIC's RSS hash (`rss[i]` where bit `i` of
    /// `with_rss` is set), one packet at a time in arrival order: each is first offered to the
    /// fast path (`fast`), which joins a segment that continues its flow's last item without
    /// parsing it; the others are parsed and merged on the general path. `chunk_last` (see
    /// `stream_or_group`) tells which segments are the last of their flow in the chunk, so
    /// that a segment alone in its burst can leave at once.
    #[allow(clippy::too_many_arguments)]
    fn stream_chunk(
        &mut self,
        chunk: impl Iterator<Item = B>,
        rss: &[u32; BURST_CHUNK],
        hints: &[u32; BURST_CHUNK],
        parses: &[Parsed],
        with_rss: u64,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let mut joins = 0u64;
        for (i, mut pkt) in chunk.enumerate() {
            let hashed = with_rss & (1 << i) != 0;
            if hashed {
                match self.fast_join(pkt, rss[i], hints[i], now, out) {
                    Ok((fast::Joined::Appended, _)) => {
                        joins += 1;
                        continue;
                    }
                    Ok((fast::Joined::Cut, _)) => continue,
                    Err(back) => pkt = back,
                }
            }
            let alone = hashed && usize::from(self.chunk_last[rss[i] as usize % LAST_SLOTS]) == i;
            self.rx_general(pkt, hints[i], alone, parses.get(i), now, out);
        }
        self.count_fast_joins(joins);
    }

    /// Counts the segments the fast path appended (`fast::Joined::Appended`), once per chunk.
    #[inline(always)]
    fn count_fast_joins(&mut self, joins: u64) {
        let s = &mut self.stats;
        s.packets_in += joins;
        s.merges += joins;
        s.run_merges += joins;
        s.fast_merges += joins;
    }

    /// The general path of [`stream_chunk`](Self::stream_chunk), for a packet the fast path
    /// refused: parsed, then merged. Kept out of line, so that the fast path's loop holds only
    /// what it needs (fewer values spilled to the stack on every packet).
    #[inline(never)]
    fn rx_general(
        &mut self,
        pkt: B,
        hint: u32,
        alone: bool,
        parsed: Option<&Parsed>,
        now: u64,
        out: &mut Vec<B>,
    ) {
        // The parse handed in is read where it lies (see `Parsed::fitting`).
        let mut fresh = None;
        let parsed = match parsed {
            Some(p) => p.fitting(pkt.head(), pkt.len(), &mut fresh),
            None => Parsed::made_in(&mut fresh, pkt.head(), pkt.len()),
        };
        match parsed.class() {
            Class::Tcp(hdr) => {
                // The flow the fast index named, when it is this packet's (its entry was
                // prefetched): no hash, no lookup. A flow's first segment after its items left
                // (the start of its next burst) comes here with its flow known.
                let known =
                    (hint != flow_table::NIL && self.flows.holds(hint, &hdr.key)).then_some(hint);
                let hash = match known {
                    Some(_) => 0,
                    None => flow_table::key_hash(&hdr.key, self.hash_seed),
                };
                self.rx_tcp(pkt, hdr, hash, known, alone, now, out);
            }
            _ => self.rx_other(pkt, parsed, now, out),
        }
    }

    /// Merges a chunk whose packets carry no RSS hash: every packet is parsed and hashed
    /// first, then each flow's packets are taken together (see [`merge_chunk`](Self::merge_chunk)).
    #[inline(never)]
    fn group_chunk(
        &mut self,
        chunk: impl Iterator<Item = B>,
        now: u64,
        out: &mut Vec<B>,
    ) -> (usize, bool) {
        let mut pending = std::mem::take(&mut self.pending);
        let mut hashed = None;
        for pkt in chunk {
            // (The chunk's first packet tells whether the port hashes.)
            if hashed.is_none() {
                hashed = Some(pkt.rss_hash().is_some());
            }
            // Parsed where it is kept (see `Parsed::parse_into`).
            pending.push(Pending {
                pkt: None,
                parsed: Parsed::EMPTY,
                hash: 0,
                next: NO_PKT,
            });
            if let Some(p) = pending.last_mut() {
                p.parsed.parse_into(pkt.head(), pkt.len());
                p.pkt = Some(pkt);
            }
        }
        let n = pending.len();
        self.merge_chunk(&mut pending, now, out);
        pending.clear();
        self.pending = pending;
        (n, hashed == Some(true))
    }

    /// [`rx_burst`](Self::rx_burst) for packets whose parse the caller already has (see
    /// [`Parsed`]), as a gateway's pipeline does: the same two ways, the fast path for packets
    /// with the NIC's RSS hash (which does not need the parse; the few packets it sends to the
    /// general path are parsed again there), and the grouping by flow, which takes the parses
    /// as they are instead of classifying again.
    pub fn rx_burst_parsed(
        &mut self,
        pkts: impl IntoIterator<Item = (B, Parsed)>,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let mut pkts = pkts.into_iter();
        loop {
            let full = if self.stream_next {
                self.stream_or_group(
                    &mut pkts.by_ref().map(|(pkt, parsed)| (pkt, Some(parsed))),
                    now,
                    out,
                )
            } else {
                let merges = self.stats.merges;
                let (n, hashed) =
                    self.group_parsed_chunk(pkts.by_ref().take(BURST_CHUNK), now, out);
                // Merges were to be had: the fast path would take most of them.
                self.stream_next = hashed && (self.stats.merges - merges) * 2 >= n as u64;
                n == BURST_CHUNK
            };
            if !full {
                break;
            }
        }
        self.settle(now, out);
    }

    /// [`group_chunk`](Self::group_chunk) for packets with their parses; returns how many there
    /// were and whether the port hashes them.
    #[inline(never)]
    fn group_parsed_chunk(
        &mut self,
        chunk: impl Iterator<Item = (B, Parsed)>,
        now: u64,
        out: &mut Vec<B>,
    ) -> (usize, bool) {
        let mut pending = std::mem::take(&mut self.pending);
        let mut hashed = None;
        pending.extend(chunk.map(|(pkt, parsed)| {
            // (The chunk's first packet tells whether the port hashes.)
            if hashed.is_none() {
                hashed = Some(pkt.rss_hash().is_some());
            }
            Pending {
                parsed: Self::trusted(&pkt, parsed),
                pkt: Some(pkt),
                hash: 0,
                next: NO_PKT,
            }
        }));
        let n = pending.len();
        self.merge_chunk(&mut pending, now, out);
        pending.clear();
        self.pending = pending;
        (n, hashed == Some(true))
    }

    /// Groups a chunk of at most [`BURST_CHUNK`] parsed packets by flow and merges them.
    #[inline(always)]
    fn merge_chunk(&mut self, pending: &mut [Pending<B>], now: u64, out: &mut Vec<B>) {
        debug_assert!(pending.len() <= BURST_CHUNK);
        // Hash every TCP segment's key, and touch its flow's bucket so the entry is on its way
        // into the cache while the rest of the chunk is grouped. In a loop of its own: reading
        // a parse right after writing it, in the loop that parses, stalled on store forwarding
        // (10 ns per packet at 800 flows).
        for p in pending.iter_mut() {
            if let Class::Tcp(h) = p.parsed.class() {
                p.hash = flow_table::key_hash(&h.key, self.hash_seed);
                self.flows.warm(p.hash);
            }
        }
        let last_barrier = group_by_flow(pending);
        // The parses are read where they lie (no copies of them: see `Parsed::parse_into`).
        for i in 0..pending.len() {
            let Some(pkt) = pending[i].pkt.take() else {
                continue; // merged with its group's first packet
            };
            let (hash, mut j) = (pending[i].hash, pending[i].next);
            // No other packet of its flow in the rest of this chunk: its list ends here and no
            // barrier follows (a list stops at a barrier; the flow may go on after it).
            let alone = j == NO_PKT && last_barrier.is_none_or(|b| b < i);
            let mut flow = match pending[i].parsed.class() {
                Class::Tcp(hdr) => self.rx_tcp(pkt, hdr, hash, None, alone, now, out),
                _ => {
                    self.rx_other(pkt, &pending[i].parsed, now, out);
                    continue;
                }
            };
            while j != NO_PKT {
                // The flow's run goes on: most segments join its item here, together.
                if let Some(f) = flow {
                    j = self.extend_run(f, pending, j, now, out);
                    if j == NO_PKT {
                        break;
                    }
                }
                let p = &mut pending[usize::from(j)];
                j = p.next;
                if let Some(pkt) = p.pkt.take() {
                    match p.parsed.class() {
                        Class::Tcp(hdr) => {
                            flow = self.rx_tcp(pkt, hdr, p.hash, flow, false, now, out)
                        }
                        // Only TCP segments are linked; should another be, it still gets a fate.
                        _ => self.rx_other(pkt, &p.parsed, now, out),
                    }
                }
            }
        }
    }

    /// Merges one packet. Call [`settle`](Self::settle) after the burst it belongs to (or use
    /// [`rx_burst`](Self::rx_burst)).
    pub fn rx(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        let parsed = Parsed::of(pkt.head(), pkt.len());
        self.rx_parsed(pkt, parsed, now, out)
    }

    /// [`rx`](Self::rx) for a packet whose parse the caller already has: nothing is classified
    /// again (one parse per packet, carried through the pipeline). A parse that does not fit
    /// the packet's shape (its length or first segment changed since) is made again. The parse
    /// must be this packet's: one of another packet of the same shape is not detected, and would
    /// file the packet under that packet's flow (never read out of bounds).
    pub fn rx_parsed(&mut self, pkt: B, parsed: Parsed, now: u64, out: &mut Vec<B>) {
        let parsed = Self::trusted(&pkt, parsed);
        match parsed.class() {
            Class::Tcp(hdr) => {
                // The previous segment's flow, when this one belongs to it: no hash, no lookup.
                let recent = self.recent.filter(|&f| self.flows.holds(f, &hdr.key));
                // The same flow again: it may simply go on with its item (the run path, as in
                // `rx_burst`; the gateway's pipeline hands packets over one at a time).
                let pkt = match recent {
                    Some(f) => match self.try_extend_tail(f, pkt, hdr, now, out) {
                        Ok(()) => return,
                        Err(pkt) => pkt,
                    },
                    None => pkt,
                };
                let hash = if recent.is_some() {
                    0
                } else {
                    flow_table::key_hash(&hdr.key, self.hash_seed)
                };
                self.recent = self.rx_tcp(pkt, hdr, hash, recent, false, now, out);
            }
            _ => self.rx_other(pkt, &parsed, now, out),
        }
    }

    /// `parsed` when it fits `pkt`, else a fresh parse.
    #[inline]
    fn trusted(pkt: &B, parsed: Parsed) -> Parsed {
        parsed.or_fresh(pkt.head(), pkt.len())
    }

    /// A packet that is not a well-formed TCP segment: passed on, after its flow's held items
    /// when it may belong to a TCP flow.
    fn rx_other(&mut self, pkt: B, parsed: &Parsed, now: u64, out: &mut Vec<B>) {
        self.stats.packets_in += 1;
        match parsed.class() {
            Class::Tcp(_) | Class::Udp(_) | Class::NonIp => self.pass(pkt, out),
            Class::Malformed(_) | Class::Fragment | Class::OtherIp => {
                if matches!(parsed.class(), Class::Malformed(_)) {
                    self.stats.malformed += 1;
                }
                self.pass_in_flow_order(pkt, now, out)
            }
        }
    }

    /// Merges one TCP segment whose key hashes to `hash`, of flow entry `flow` when the caller
    /// knows it (then `hash` is not used); returns the flow's entry, when it has one. `alone`:
    /// no other packet of the flow is in this burst, so a segment of a flow that holds nothing
    /// and would not wait for more leaves at once, as the one-segment item it would have made
    /// (see [`leaves_alone`](Self::leaves_alone)).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn rx_tcp(
        &mut self,
        pkt: B,
        hdr: &Headers,
        hash: u32,
        flow: Option<u32>,
        alone: bool,
        now: u64,
        out: &mut Vec<B>,
    ) -> Option<u32> {
        self.stats.packets_in += 1;
        let seg = match self.segment(&pkt, hdr) {
            Ok(seg) => seg,
            Err(refusal) => {
                match refusal {
                    Refusal::BadIpChecksum => self.stats.bad_ip_checksum += 1,
                    Refusal::BadTcpChecksum => self.stats.bad_checksum += 1,
                    Refusal::Unmergeable => {}
                }
                // Not merged: the flow's items go first so the order on the wire is kept; the
                // segment leaves untouched (a bad one for the receiver to drop, costing only
                // itself).
                let flow = flow.or_else(|| self.flows.find(hash, &hdr.key));
                if let Some(flow) = flow {
                    self.flush_flow(flow, now, out);
                }
                self.pass(pkt, out);
                return flow;
            }
        };
        let flow = match flow {
            Some(flow) => flow,
            None => self.flow_for(hash, &hdr.key, now, out),
        };
        self.update_flow_on_arrival(flow, &seg, now);
        if alone && self.leaves_alone(flow, &seg) {
            self.emit_alone(flow, pkt, &seg, out);
            return Some(flow);
        }
        let rss = pkt.rss_hash();
        self.merge(flow, pkt, seg, now, out);
        self.touch(flow);
        // The flow's next segment may join its last item on the fast path.
        if let Some(rss) = rss {
            if matches!(self.flows.get(flow).n_items, 1 | 2) {
                self.fast.note(rss, flow);
            }
        }
        Some(flow)
    }

    /// Whether a segment with no other packet of its flow in the burst would become an item of
    /// its own that the burst's settle sends on unchanged: the flow holds nothing, the segment
    /// fits the iMTU, a slot is free, and the lone item would not wait for an ETM window (the
    /// same test `settle_flow` makes, for an item that is no cut's rest).
    #[inline]
    fn leaves_alone(&self, flow: u32, seg: &Segment) -> bool {
        let e = self.flows.get(flow);
        let d = &self.cfg.delay;
        let closed = seg.flags & (wire::tcp_flags::PSH | wire::tcp_flags::FIN) != 0;
        let would_wait = d.enabled
            && !closed
            && e.rate >= self.etm.rate_threshold()
            && f64::from(e.yield_avg) <= d.yield_bypass;
        e.items == flow_table::NIL
            && !would_wait
            && u32::from(seg.ip_len) <= u32::from(self.cfg.imtu)
            && !self.free_items.is_empty()
    }

    /// Sends `pkt` on as the one-segment item [`merge`](Self::merge) and the burst's settle
    /// would have made and sent (see [`leaves_alone`](Self::leaves_alone)): the same bytes
    /// (Ethernet padding dropped), the same counters, the same yield and delay records, without
    /// building the item. Round-robin traffic, where nothing merges, takes this path.
    fn emit_alone(&mut self, flow: u32, mut pkt: B, seg: &Segment, out: &mut Vec<B>) {
        let frame_len = seg.frame_len();
        if pkt.len() > frame_len && !pkt.truncate(frame_len) {
            return self.pass(pkt, out);
        }
        let imtu = u32::from(self.cfg.imtu);
        let ip_len = u32::from(seg.ip_len);
        let e = self.flows.get_mut(flow);
        let full = ip_len + u32::from(e.mss) > imtu;
        e.yield_avg = delay::update_yield(e.yield_avg, full, ip_len as f32 / imtu as f32);
        // It held no items (`leaves_alone`), so it has no deadline.
        debug_assert_eq!(self.etm.timers.deadline(flow), 0);
        self.stats.payload_in += u64::from(seg.payload_len);
        if full {
            self.stats.payload_full += u64::from(seg.payload_len);
        }
        // It arrived now and leaves in the same burst: the 1 ns an item's record floors at.
        self.record_delay(1, 1);
        self.stats.packets_out += 1;
        out.push(pkt);
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
        self.flush_delay_record();
    }

    /// Emits everything held (shutdown, or a caller that wants no state left).
    pub fn flush_all(&mut self, now: u64, out: &mut Vec<B>) {
        let flows: Vec<u32> = self.flows.occupied().collect();
        for flow in flows {
            self.flush_flow(flow, now, out);
        }
        self.etm.clear();
        self.flush_delay_record();
    }

    /// Passes on a packet the engine never merges (IPv6 extension headers, a first fragment, a
    /// malformed TCP header) after the items held for its flow, if it names one: every packet
    /// of a flow keeps its order relative to that flow's held data.
    #[cold]
    fn pass_in_flow_order(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        let key = wire::flow_of(pkt.head(), pkt.len()).filter(|k| k.proto == ip_proto::TCP);
        if let Some(key) = key {
            let hash = flow_table::key_hash(&key, self.hash_seed);
            if let Some(flow) = self.flows.find(hash, &key) {
                self.flush_flow(flow, now, out);
            }
        }
        self.pass(pkt, out)
    }

    // ---- per-packet steps ----

    fn flow_for(&mut self, hash: u32, key: &FlowKey, now: u64, out: &mut Vec<B>) -> u32 {
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

    pub(super) fn touch(&mut self, flow: u32) {
        touch_entry(self.flows.get_mut(flow), flow, &mut self.touched);
    }
}

/// Before a chunk is taken in arrival order: reads the RSS hash of each packet of `chunk` (at
/// most [`BURST_CHUNK`]) into `rss`, and the flow the fast index names for it into `hints`;
/// returns which packets carry one (bit `i` for `chunk[i]`). Notes in `chunk_last` the last
/// packet of each hash: a packet is the last of its flow in the chunk when it is the last of
/// its hash. A false "not last" only keeps a segment for the settle, which sends it anyway. The
/// table is not cleared (a 1 KB store per chunk): every slot read for this chunk was written
/// here. On the fields it reads and writes, so a caller may hold others.
#[inline(always)]
fn prologue<B: PacketBuf>(
    fast: &fast::FastIndex,
    flows: &FlowTable,
    chunk_last: &mut [u8; LAST_SLOTS],
    chunk: &[B],
    rss: &mut [u32; BURST_CHUNK],
    hints: &mut [u32; BURST_CHUNK],
) -> u64 {
    let mut with_rss = 0u64;
    // Each packet's fast-index slot is prefetched as its hash is read...
    for (i, (pkt, h)) in chunk.iter().zip(rss.iter_mut()).enumerate() {
        if let Some(hash) = pkt.rss_hash() {
            *h = hash;
            with_rss |= 1 << i;
            chunk_last[hash as usize % LAST_SLOTS] = i as u8;
            fast.warm_slot(hash);
        }
    }
    // ...then the flow entry each slot names: the slots were asked for all at once, so their
    // misses overlap instead of each waiting for the one before. The flows are kept as hints
    // for the fast path, which need not read the index again.
    for (i, (&hash, hint)) in rss
        .iter()
        .zip(hints.iter_mut())
        .enumerate()
        .take(chunk.len())
    {
        if with_rss & (1 << i) != 0 {
            *hint = fast.warm(hash, flows);
        }
    }
    with_rss
}

/// Lists `flow` (its entry `e`) among the flows to settle after this burst, once.
#[inline(always)]
fn touch_entry(e: &mut FlowEntry, flow: u32, touched: &mut Vec<u32>) {
    if e.flags & flags::TOUCHED == 0 {
        e.flags |= flags::TOUCHED;
        touched.push(flow);
    }
}

/// The limit in `limits` (a [`Merger`]'s, by header length) of an item with headers `layout`.
#[inline(always)]
fn limit_of(limits: &[u32; LIMIT_SLOTS], layout: Layout) -> u32 {
    limits[layout.l3_l4_len() as usize % LIMIT_SLOTS]
}

/// Links the TCP segments of `pending` that share a flow (`next`), each list in arrival order.
/// A packet that may belong to a TCP flow without being a plain segment (a fragment, IPv6
/// extension headers, a malformed frame) closes every open list: no segment after it joins a
/// list that started before it, so none is moved across it. O(n): a small open-addressed table
/// of the lists' last packets, keyed by the flow hash and checked against the full key.
/// Returns the index of the last barrier, if any.
fn group_by_flow<B>(pending: &mut [Pending<B>]) -> Option<usize> {
    const SLOTS: usize = 2 * BURST_CHUNK;
    const EMPTY: u8 = u8::MAX;
    let mut last = [EMPTY; SLOTS];
    let mut last_barrier = None;
    for i in 0..pending.len() {
        let (key, hash) = match pending[i].parsed.class() {
            Class::Tcp(h) => (h.key, pending[i].hash),
            Class::Udp(_) | Class::NonIp => continue,
            Class::Malformed(_) | Class::Fragment | Class::OtherIp => {
                last = [EMPTY; SLOTS];
                last_barrier = Some(i);
                continue;
            }
        };
        let mut slot = hash as usize % SLOTS;
        loop {
            let l = last[slot];
            if l == EMPTY {
                last[slot] = i as u8;
                break;
            }
            let same = match pending[usize::from(l)].parsed.class() {
                Class::Tcp(h) => pending[usize::from(l)].hash == hash && h.key == key,
                _ => false,
            };
            if same {
                pending[usize::from(l)].next = i as u8;
                last[slot] = i as u8;
                break;
            }
            slot = (slot + 1) % SLOTS;
        }
    }
    last_barrier
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{HeapBuf, HeapPool};

    #[test]
    fn stream_hints_name_each_run_of_one_entry_once() {
        let mut m = Merger::<HeapBuf>::new(MergeConfig::default(), HeapPool::new(16)).unwrap();
        let nil = flow_table::NIL;
        let hints = [3, 3, nil, 3, 5, 5, 7];
        m.stream.hints[..hints.len()].copy_from_slice(&hints);
        // Packet 5 carries no hash: its place is not read.
        m.stream.with_rss = 0b101_1111;
        m.stream.len = hints.len();
        // A packet the index named no entry for does not end a run; a new entry starts one.
        assert_eq!(m.stream_hints().collect::<Vec<_>>(), [3, 5, 7]);
        // Only the chunk's own packets count.
        m.stream.len = 6;
        assert_eq!(m.stream_hints().collect::<Vec<_>>(), [3, 5]);
        m.stream.with_rss = 0;
        assert_eq!(m.stream_hints().count(), 0);
    }
}
