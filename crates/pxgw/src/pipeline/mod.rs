//! The gateway's per-packet logic, independent of ports so it runs on any [`PacketBuf`]
//! (SIGCOMM'26 §3):
//!
//! - **inbound** (outside → inside): SYN/SYN-ACK have their MSS raised and the peer's MSS kept
//!   as the flow's PMTU hint; TCP of a connection whose handshake completed through the gateway
//!   is merged to the iMTU (a SYN alone only makes a half-open entry, which a SYN flood can churn
//!   but never turn into a connection), or that was learned from its data after a restart (a run
//!   of in-order MSS-sized segments the inside host acknowledges: [`crate::conn`]); UDP is
//!   packed into caravans (except excluded ports, families not configured, double-tagged frames
//!   and datagrams whose TTL or hop limit is at most `pass_ttl`: those pass unpacked, counted),
//!   and a datagram that nothing joins goes as it came, never as a caravan of one; everything
//!   else passes untouched.
//! - **outbound** (inside → outside): SYN/SYN-ACK have their MSS clamped to the eMTU; TCP larger
//!   than the flow's PMTU is split; caravans (the DSCP mark and a caravan header) are unpacked,
//!   while a datagram that only wears the mark passes untouched; other packets larger than the
//!   eMTU are handled as a router would, so nothing is lost without a trace: IPv4 with DF clear
//!   is fragmented ([`crate::fragmenter`]), IPv4 with DF set and IPv6 are dropped, counted, and
//!   answered with "fragmentation needed" or Packet Too Big ([`crate::icmp`], rate-limited);
//!   everything else passes untouched.
//! - **inbound above the iMTU** (reassembled fragments, jumbo frames from outside): handled as
//!   a router would, as the outbound path handles the eMTU, instead of being sent into a network
//!   that cannot carry them: IPv4 with DF clear is fragmented to the iMTU, the rest dropped,
//!   counted and answered toward the outside sender (frag needed, Packet Too Big).
//! - **ICMP from outside** (inbound): an error answering one of the gateway's own F-PMTUD probes
//!   is consumed; a Packet Too Big (or "fragmentation needed") quoting a connection the gateway
//!   splits caps that destination's split size, and still goes to the inside host. IPv6
//!   connections whose split segments the inside host keeps retransmitting fall back to
//!   `pmtu.blackhole_mtu` (docs/fpmtud.md).

use pxio::caravan::{self, CaravanBuilder, CaravanConfig, CaravanError, SameFlowRefused};
use pxio::merge::{Merger, BURST_CHUNK};
use pxio::split::SplitOffloads;
use pxio::wire::{self, Class, FlowKey, Headers, Parsed};
use pxio::PacketBuf;

use std::net::IpAddr;

use crate::config::{CaravanFamily, Config, Icmp as IcmpConfig, PmtuPolicy};
use crate::conn::{self, ConnTable, KeyWords};
use crate::fragmenter::fragment_ipv4;
use crate::icmp::{self as icmp_err, RateLimiter};
use crate::lru_slab::LruSlab;
use crate::mss;
use crate::pmtud::PathMtu;
use crate::stats::{CaravanSummary, Report, SizeRun};

mod caravans;
mod inbound_tcp;
mod outbound_tcp;
mod paths;
mod router;

use caravans::{dscp, Open, HOT_CARAVANS, MAX_OPEN_CARAVANS};
use router::ip_layout;

/// An untagged Ethernet header.
const ETH_HLEN: usize = 14;
/// An Ethernet header with one VLAN tag: what a frame may add to its link's MTU.
const VLAN_ETH_HLEN: usize = 18;
/// Half-open connections remembered, per worker (oldest evicted: `crate::conn`).
const MAX_HALF_OPEN: usize = 65536;
/// Connections being learned from their data, per worker (oldest evicted: `crate::conn`).
const MAX_LEARNING: usize = 16384;
/// Connections learned one way (`[connections] one_way`), per worker (oldest evicted).
const MAX_ONE_WAY: usize = 16384;
/// A recency stamp no packet has (see `Pipeline::recent`).
const NEVER: (u64, u32) = (u64::MAX, 0);
/// Packets gathered for the merge engine in one burst, before the vector grows: a burst of
/// 32 coalesced packets, each cut into up to eight iMTU pieces.
const GATHER_CAPACITY: usize = 256;

/// What the ports do for the gateway on transmit, as granted when they started. Receive
/// offloads need no setting: the RSS hash and the checksum verdicts travel with each buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offloads {
    /// The inside port fills IPv4 and TCP checksums: merged packets leave with a request
    /// instead of checksums summed here.
    pub inside_checksum: bool,
    /// The largest IP packet a TSO request may carry on the inside port, or 0 without TSO:
    /// merged packets grow past the iMTU and the NIC cuts them at it (needs `inside_checksum`).
    pub inside_tso_max_len: u16,
    /// What the outside port does for split pieces.
    pub outside: SplitOffloads,
}

impl From<SplitOffloads> for Offloads {
    fn from(outside: SplitOffloads) -> Self {
        Self {
            outside,
            ..Self::default()
        }
    }
}

/// The per-worker processing state.
pub struct Pipeline<B: PacketBuf> {
    cfg: Settings,
    merger: Merger<B>,
    conns: ConnTable,
    /// Per UDP flow: what it holds for the inside, and since when.
    /// In the order they opened (nothing promotes an entry), so the oldest is the first due,
    /// and the first to leave early when every place is taken.
    caravans: LruSlab<KeyWords, (Open<B>, u64), foldhash::fast::RandomState>,
    pool: B::Pool,
    report: Report,
    pmtu: PathMtu,
    /// Frames the gateway itself sends outside (F-PMTUD probes and reports).
    replies: Vec<Vec<u8>>,
    /// Frames the gateway itself sends inside (ICMP errors).
    inside_replies: Vec<Vec<u8>>,
    /// The ICMP error rate limits.
    limiter: RateLimiter,
    /// Inside an inbound burst: what goes to the merge engine is gathered in `gathered`.
    in_burst: bool,
    /// The burst's packets for the merge engine, with their parses.
    gathered: Vec<(B, Parsed)>,
    /// The chunk of an inbound burst being taken one packet at a time, and the index of the
    /// packet at hand while the merge engine streams it ([`Merger::begin_stream`]).
    chunk: Vec<B>,
    streaming: Option<usize>,
    /// The parses of an outbound chunk, made in a pass of their own
    /// ([`outbound_burst`](Self::outbound_burst)): one per place, written where they stay.
    chunk_parsed: Vec<Parsed>,
    /// The pieces of a coalesced packet being cut (kept, so cutting allocates nothing).
    pieces: Vec<B>,
    /// Whether frames cut short were reported, (outbound, inbound).
    warned_bad_ip_length: [bool; 2],
    /// Established connections seen, by a fold of their key (`inbound_tcp::recent_slot`),
    /// with the acknowledgement a plain inbound segment of theirs carried, the recency period,
    /// the connection table's generation and their slot in it (`inbound_tcp`,
    /// `outbound_tcp`).
    recent: Box<[inbound_tcp::Recent; inbound_tcp::RECENT_SLOTS]>,
    /// The same, per flow entry of the merge engine: the connection of the flow the entry held
    /// when a segment of it last refreshed the connection. A segment the engine's fast path
    /// joins, or one it refused whose entry the engine named ([`Merger::streamed_flow`]),
    /// finds its connection here, whatever the flow count: the hashed slots above hold 1,024
    /// connections, the engine's entries every flow it merges (`inbound_tcp`).
    flow_recent: Vec<inbound_tcp::Recent>,
    /// The stamp of each flow entry's record (`flow_recent`), in eight bytes: what the fast
    /// path's segments check, eight entries to a cache line.
    fast_seen: Vec<(u32, u32)>,
    /// Hints to open caravans, by a fold of an untagged UDP frame's address and port bytes
    /// (`caravans::hint_slot`): the place in `caravans` of what a flow of that hint slot holds
    /// (its caravan, or its lone datagram), which the next frame of the slot is tried on by its
    /// header bytes alone (`join_hot_caravan`).
    hot_caravans: Box<[Option<u32>; HOT_CARAVANS]>,
}

/// What the pipeline needs of the configuration, resolved once.
#[derive(Clone, Debug)]
struct Settings {
    emtu: u16,
    imtu: u16,
    merge: bool,
    mss_rewrite: bool,
    /// The smallest MSS the gateway raises, and the smallest it splits to: IPv4, IPv6
    /// (`[mss] min`, `min_v6`).
    mss_floor: (u16, u16),
    /// The caravan mark (`[caravan] dscp`), which no inbound packet keeps unless pxgw packed it,
    /// caravans on or off.
    mark: u8,
    caravan: Option<CaravanConfig>,
    caravan_timeout_ns: u64,
    /// The ports never packed (`[caravan] exclude_ports`), as a set of 65,536 bits: one load
    /// per port, however long the list.
    exclude: Box<[u64; 1024]>,
    /// Pack IPv4 and IPv6 UDP (`[caravan] families`).
    caravan_families: (bool, bool),
    pass_ttl: u8,
    policy: PmtuPolicy,
    fallback: PmtuPolicy,
    conservative: u16,
    offloads: SplitOffloads,
    /// The inside port fills checksums (pieces of coalesced packets leave it that way).
    inside_checksum: bool,
    icmp: IcmpConfig,
    learn_ptb: bool,
    blackhole_retransmits: u8,
    blackhole_window_ns: u64,
    blackhole_mtu: u16,
}

impl<B: PacketBuf> Pipeline<B> {
    /// A pipeline for `cfg`, taking new header buffers from `pool` (and a second, cloned handle
    /// for the merge engine).
    pub fn new(
        cfg: &Config,
        pool: B::Pool,
        merge_pool: B::Pool,
        offloads: impl Into<Offloads>,
    ) -> anyhow::Result<Self> {
        let offloads = offloads.into();
        let mut merge_cfg = cfg.merge_engine()?;
        merge_cfg.checksum_offload = offloads.inside_checksum;
        merge_cfg.tso_max_len = if offloads.inside_checksum {
            offloads.inside_tso_max_len
        } else {
            0
        };
        let merger = Merger::new(merge_cfg, merge_pool)?;
        Ok(Self {
            flow_recent: vec![inbound_tcp::Recent::EMPTY; merger.flow_capacity()],
            fast_seen: vec![inbound_tcp::fast_stamp(NEVER); merger.flow_capacity()],
            cfg: Settings {
                emtu: cfg.emtu(),
                imtu: cfg.imtu(),
                merge: cfg.merge.enabled,
                mss_rewrite: cfg.mss.rewrite,
                mss_floor: (cfg.mss.min, cfg.mss.min_v6),
                mark: cfg.caravan.dscp,
                caravan: cfg.caravan.enabled.then_some(CaravanConfig {
                    dscp: cfg.caravan.dscp,
                    imtu: cfg.imtu(),
                    max_datagrams: cfg.caravan.max_datagrams,
                }),
                caravan_timeout_ns: cfg.caravan.timeout_ns()?,
                exclude: {
                    let mut set = Box::new([0u64; 1024]);
                    for &p in &cfg.caravan.exclude_ports {
                        set[usize::from(p) / 64] |= 1 << (p % 64);
                    }
                    set
                },
                caravan_families: (
                    cfg.caravan.families.contains(&CaravanFamily::Ipv4),
                    cfg.caravan.families.contains(&CaravanFamily::Ipv6),
                ),
                pass_ttl: cfg.caravan.pass_ttl,
                policy: cfg.pmtu.policy,
                fallback: cfg.pmtu.fallback,
                conservative: cfg.pmtu.conservative_mtu,
                offloads: offloads.outside,
                inside_checksum: offloads.inside_checksum,
                icmp: cfg.icmp.clone(),
                learn_ptb: cfg.pmtu.learn_ptb,
                blackhole_retransmits: cfg.pmtu.blackhole_retransmits,
                blackhole_window_ns: cfg.pmtu.blackhole_window_ms.saturating_mul(1_000_000),
                blackhole_mtu: cfg.pmtu.blackhole_mtu,
            },
            merger,
            conns: {
                let t = ConnTable::new(cfg.connections.max, MAX_HALF_OPEN, MAX_LEARNING);
                if cfg.connections.one_way {
                    t.with_one_way(MAX_ONE_WAY)
                } else {
                    t
                }
            },
            caravans: LruSlab::with_hasher(
                MAX_OPEN_CARAVANS,
                foldhash::fast::RandomState::default(),
            ),
            pool,
            report: Report::default(),
            pmtu: PathMtu::from_config(cfg)?,
            replies: Vec::with_capacity(64),
            inside_replies: Vec::with_capacity(64),
            limiter: RateLimiter::new(&cfg.icmp, 0),
            in_burst: false,
            gathered: Vec::with_capacity(GATHER_CAPACITY),
            chunk: Vec::with_capacity(BURST_CHUNK),
            streaming: None,
            chunk_parsed: vec![Parsed::of(&[], 0); BURST_CHUNK],
            hot_caravans: Box::new([None; HOT_CARAVANS]),
            pieces: Vec::with_capacity(64),
            warned_bad_ip_length: [false; 2],
            recent: Box::new([inbound_tcp::Recent::EMPTY; inbound_tcp::RECENT_SLOTS]),
        })
    }

    /// The counters so far (merge and delay figures included, the ratios derived). Allocates
    /// (the delay histogram, the paths): a worker publishes with
    /// [`report_into`](Self::report_into) instead.
    pub fn report(&self) -> Report {
        let mut r = Report::default();
        self.report_into(&mut r);
        r.delay_ns = Some(self.merge_delay().clone());
        r.pmtud_paths = self.discovered_paths().to_vec();
        r.finish();
        r
    }

    /// The counters so far into `r`, without the delay histogram and the discovered paths
    /// ([`merge_delay`](Self::merge_delay), [`discovered_paths`](Self::discovered_paths)) and
    /// without deriving the ratios (the readers do): no allocation, for a worker to publish.
    pub fn report_into(&self, r: &mut Report) {
        r.copy_counters_from(&self.report);
        let s = self.merger.stats();
        r.merge.payload_in = s.payload_in;
        r.merge.payload_full = s.payload_full;
        r.merge.merges = s.merges;
        r.merge.cuts = s.cuts;
        r.merge.held_items = s.held_items;
        r.merge.bad_checksum = s.bad_checksum;
        r.merge.bad_ip_checksum = s.bad_ip_checksum;
        r.drops.merge_no_buffer = s.dropped_no_buffer;
        r.merge.evictions = s.evictions;
        r.merge.flows = self.merger.flows() as u64;
        r.connections = self.conns.len() as u64;
        r.mss.half_open = self.conns.half_open() as u64;
        r.mss.half_open_evicted = self.conns.evicted();
        r.mss.established_evicted = self.conns.established_evicted();
        r.mss.syn_ignored = self.conns.syn_ignored();
        r.mss.learned = self.conns.learned();
        r.mss.learned_one_way = self.conns.learned_one_way();
        r.pmtud = self.pmtu.summary();
    }

    /// The delay merging added per segment so far, ns.
    pub fn merge_delay(&self) -> &hdrhistogram::Histogram<u64> {
        &self.merger.stats().delay_ns
    }

    /// The merge engine's own statistics (which of its paths took the segments, among them),
    /// for tests and tools that look inside it; the report holds what operators read.
    pub fn merge_stats(&self) -> &pxio::merge::MergeStats {
        self.merger.stats()
    }

    /// The path MTUs F-PMTUD discovered (the most recent), oldest first.
    pub fn discovered_paths(&self) -> &[crate::pmtud::DiscoveredPath] {
        self.pmtu.paths()
    }

    /// Counts a frame sent toward the inside (`inbound`) or the outside.
    pub fn count_sent(&mut self, inbound: bool, bytes: usize) {
        self.count_sent_burst(inbound, [bytes]);
    }

    /// Counts the frames of a TX burst sent toward the inside (`inbound`) or the outside, of
    /// lengths `lens`: the same counts as [`count_sent`](Self::count_sent) for each, with the
    /// sizes recorded once per run of one size (a burst of ACKs, or of one flow's pieces, is
    /// mostly of one size; finding a length's bucket costs more than comparing it).
    pub fn count_sent_burst(&mut self, inbound: bool, lens: impl IntoIterator<Item = usize>) {
        let report = &mut self.report;
        let (d, h) = if inbound {
            (&mut report.inbound, &mut report.sizes.inbound_sent)
        } else {
            (&mut report.outbound, &mut report.sizes.outbound_sent)
        };
        let mut run = SizeRun::default();
        for len in lens {
            d.packets_out += 1;
            d.bytes_out += len as u64;
            d.max_frame_out = d.max_frame_out.max(len as u64);
            run.add(len, h);
        }
        run.flush(h);
    }

    /// Counts frames the TX queue would not take (freed unsent).
    pub fn count_tx_dropped(&mut self, n: u64) {
        self.report.drops.tx_dropped += n;
    }

    /// When the next merge, caravan or probe deadline falls due, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let caravan = self
            .oldest_caravan()
            .map(|t| t + self.cfg.caravan_timeout_ns);
        [
            self.merger.next_deadline(),
            caravan,
            self.pmtu.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the frames the gateway itself sends outside (F-PMTUD probes and reports) to `out`,
    /// as buffers from the header pool (chained, since a probe is eMTU-sized).
    pub fn take_replies(&mut self, out: &mut Vec<B>) {
        if self.replies.is_empty() {
            return;
        }
        let mut frames = std::mem::take(&mut self.replies);
        // ICMP errors sent inside are counted by the router counters instead.
        self.report.gateway_frames.sent += frames.len() as u64;
        self.frames_to_bufs(&mut frames, out);
        self.replies = frames;
    }

    /// Moves the frames the gateway itself sends inside (ICMP errors) to `out`, as
    /// [`take_replies`](Self::take_replies) does.
    pub fn take_inside_replies(&mut self, out: &mut Vec<B>) {
        if self.inside_replies.is_empty() {
            return;
        }
        let mut frames = std::mem::take(&mut self.inside_replies);
        self.frames_to_bufs(&mut frames, out);
        self.inside_replies = frames;
    }

    fn frames_to_bufs(&mut self, frames: &mut Vec<Vec<u8>>, out: &mut Vec<B>) {
        // Small enough for any header pool (DPDK keeps 128 B of a 256 B data room as headroom).
        const CHUNK: usize = 96;
        for frame in frames.drain(..) {
            let mut parts = frame.chunks(CHUNK).map(|c| B::alloc_with(&self.pool, c));
            let Some(Some(mut head)) = parts.next() else {
                self.report.drops.pool_exhausted += 1;
                continue;
            };
            let mut ok = true;
            for part in parts {
                match part.map(|p| head.chain(p)) {
                    Some(Ok(())) => {}
                    _ => ok = false,
                }
            }
            if ok {
                out.push(head);
            } else {
                self.report.drops.pool_exhausted += 1;
            }
        }
    }

    /// Counts a frame dropped for an IP length its bytes do not match, and says once per
    /// direction what usually cuts frames short.
    fn bad_ip_length(&mut self, inbound: bool) {
        self.report.drops.bad_ip_length += 1;
        let warned = &mut self.warned_bad_ip_length[usize::from(inbound)];
        if !*warned {
            *warned = true;
            let port = if inbound { "external" } else { "internal" };
            tracing::warn!(
                port,
                "frames shorter than their IP length arrive on the {port} port and are dropped \
                 (drops.bad_ip_length): a kernel offload (GRO, a peer's TSO) under a \
                 net_af_packet port cuts packets to its ring frame"
            );
        }
    }

    /// Whether anything is held.
    pub fn holding(&self) -> bool {
        self.merger.stats().held_items > 0 || !self.caravans.is_empty()
    }

    // ---- bursts ----

    /// Handles one RX burst from outside, whole; what goes inside is appended to `out`. Each
    /// packet is parsed once, and the TCP segments go to the merge engine as a burst, its fast
    /// path and its grouping by flow as they run alone:
    ///
    /// - where the port gives the RSS hash and segments mostly continue their flows' items,
    ///   each chunk of the burst is taken in arrival order: a packet is first offered to the
    ///   engine's fast path, which joins a segment that continues its flow's last item before
    ///   anything parses it (the connection was known when the item began, and the segment
    ///   carries the item's acknowledgement, applied when the item began); what it
    ///   refuses is handled here and, if it is to be merged, goes to the engine's general path
    ///   at once ([`Merger::begin_stream`]);
    /// - otherwise the segments for the engine are gathered and handed to it together at the
    ///   end of the chunk ([`Merger::rx_burst_parsed`]).
    ///
    /// The burst ends settled: what the merge engine does not hold for a delay window, and what
    /// the caravans' and probes' timers release, is in `out`.
    pub fn inbound_burst(&mut self, pkts: impl IntoIterator<Item = B>, now: u64, out: &mut Vec<B>) {
        self.in_burst = true;
        let (mut packets, mut bytes) = (0u64, 0u64);
        let mut sizes = SizeRun::default();
        let mut pkts = pkts.into_iter();
        let mut chunk = std::mem::take(&mut self.chunk);
        let fits = usize::from(self.cfg.imtu) + ETH_HLEN;
        loop {
            chunk.extend(pkts.by_ref().take(BURST_CHUNK));
            let n = chunk.len();
            if n == 0 {
                break;
            }
            // What earlier chunks gathered goes to the engine before this one is streamed.
            self.merge_gathered(now, out);
            let stream = self.cfg.merge && self.merger.begin_stream(&chunk);
            if stream && self.flow_records_outgrow_cache() {
                self.prefetch_flow_records();
            }
            for (i, mut pkt) in chunk.drain(..).enumerate() {
                packets += 1;
                bytes += pkt.len() as u64;
                sizes.add(pkt.len(), &mut self.report.sizes.inbound_received);
                // An outside receiver's ACK (`outside_ack`); a frame longer than any bare ACK
                // never tries it.
                if pkt.len() <= inbound_tcp::BARE_ACK_MAX_FRAME {
                    match self.outside_ack(pkt, now, out) {
                        Ok(()) => continue,
                        Err(back) => pkt = back,
                    }
                }
                if stream {
                    // A frame longer than an untagged iMTU frame may be coalesced (LRO, GRO):
                    // the fast path takes it whole when its item may hold it, and the general
                    // path cuts it first otherwise (`inbound_tcp`). It is when its IP packet
                    // is above the iMTU, not a tagged frame of an iMTU-sized one (the fast
                    // path takes a frame that holds exactly its IP packet).
                    let coalesced = pkt.len() > fits && {
                        let l2 = wire::EthernetFrame::new_checked(pkt.head())
                            .map_or(ETH_HLEN, |e| e.header_len());
                        pkt.len() - l2 > usize::from(self.cfg.imtu)
                    };
                    match self.merger.offer_fast(i, pkt, now, out) {
                        Ok(flow) => {
                            if coalesced {
                                self.count_coalesced_inbound(1);
                            }
                            self.fast_joined(flow, now, out);
                            continue;
                        }
                        Err(back) => pkt = back,
                    }
                }
                // A longer frame may be above the iMTU, for the router's handling.
                if pkt.len() <= fits {
                    match self.join_hot_caravan(pkt, now, out) {
                        Ok(()) => continue,
                        Err(back) => pkt = back,
                    }
                }
                if stream {
                    self.streaming = Some(i);
                }
                self.inbound_one(pkt, now, out);
            }
            self.streaming = None;
            if stream {
                self.merger.end_stream();
            }
            if n < BURST_CHUNK {
                break;
            }
        }
        self.chunk = chunk;
        sizes.flush(&mut self.report.sizes.inbound_received);
        self.report.inbound.packets_in += packets;
        self.report.inbound.bytes_in += bytes;
        self.in_burst = false;
        self.merge_gathered(now, out);
        self.end_of_burst(now, out);
    }

    /// Handles one RX burst from inside, whole; what goes outside is appended to `out`.
    pub fn outbound_burst(
        &mut self,
        pkts: impl IntoIterator<Item = B>,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let (mut packets, mut bytes) = (0u64, 0u64);
        let mut sizes = SizeRun::default();
        let mut pkts = pkts.into_iter();
        let mut chunk = std::mem::take(&mut self.chunk);
        let mut parsed = std::mem::take(&mut self.chunk_parsed);
        loop {
            chunk.extend(pkts.by_ref().take(BURST_CHUNK));
            let n = chunk.len();
            if n == 0 {
                break;
            }
            // The chunk is parsed first, and each TCP segment's connection slot fetched, so
            // that the chunk's cache misses on connections overlap rather than come one per
            // segment.
            for (p, pkt) in parsed.iter_mut().zip(&chunk) {
                p.parse_into(pkt.head(), pkt.len());
                if let Class::Tcp(h) = p.class() {
                    self.prefetch_recent(&conn::reverse(&h.key));
                }
            }
            for (pkt, p) in chunk.drain(..).zip(parsed.iter()) {
                packets += 1;
                bytes += pkt.len() as u64;
                sizes.add(pkt.len(), &mut self.report.sizes.outbound_received);
                self.outbound_parsed(pkt, p, now, out);
            }
            if n < BURST_CHUNK {
                break;
            }
        }
        self.chunk = chunk;
        self.chunk_parsed = parsed;
        sizes.flush(&mut self.report.sizes.outbound_received);
        self.report.outbound.packets_in += packets;
        self.report.outbound.bytes_in += bytes;
    }

    // ---- inbound ----

    /// Handles one frame from outside; what goes inside is appended to `out`.
    pub fn inbound(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        self.report.inbound.packets_in += 1;
        self.report.inbound.bytes_in += pkt.len() as u64;
        self.report.sizes.inbound_received.record(pkt.len());
        self.inbound_one(pkt, now, out);
    }

    /// [`inbound`](Self::inbound) without the receive counters (a burst counts them once).
    fn inbound_one(&mut self, mut pkt: B, now: u64, out: &mut Vec<B>) {
        if !self.inbound_unmark(&mut pkt) {
            return;
        }
        // Only a frame longer than an untagged iMTU frame can hold an IP packet above the iMTU:
        // the common case costs one comparison.
        let imtu = usize::from(self.cfg.imtu);
        if pkt.len() > imtu + ETH_HLEN {
            match ip_layout(pkt.head()) {
                Some(ip) if ip.len > imtu => {
                    // TCP this large is coalesced (the NIC's LRO, the kernel's GRO): a run of
                    // segments, cut at the iMTU (`inbound_tcp`), not an oversize packet.
                    let parsed = Parsed::of(pkt.head(), pkt.len());
                    return match parsed.class() {
                        Class::Tcp(h) => self.inbound_tcp(pkt, &parsed, h, now, out),
                        // Cut short: no packet of that length ever arrived to answer for.
                        Class::Malformed(wire::Malformed::BadTotalLength) => {
                            self.bad_ip_length(true)
                        }
                        _ => self.inbound_oversize(pkt, ip, now, out),
                    };
                }
                None if pkt.len() > imtu + VLAN_ETH_HLEN => {
                    self.report.drops.oversize_inbound += 1;
                    return;
                }
                _ => {}
            }
        }
        // Parsed once here; the merge engine, the PMTU tracker and the caravan builder take the
        // same parse.
        let parsed = Parsed::of(pkt.head(), pkt.len());
        // By reference: a copy of the headers just written would stall on store forwarding.
        match parsed.class() {
            Class::Tcp(h) => self.inbound_tcp(pkt, &parsed, h, now, out),
            Class::Udp(h) => {
                // Only F-PMTUD traffic (probes for the inside, reports for the gateway's own
                // probes) is shown to the path-MTU state; the rest never pays for it.
                let port = self.pmtu.port();
                if (h.key.sport == port || h.key.dport == port)
                    && pkt.num_segs() == 1
                    && self
                        .pmtu
                        .on_inbound_parsed(pkt.head(), &parsed, now, &mut self.replies)
                {
                    // A report for one of the gateway's own probes.
                    self.report.gateway_frames.received += 1;
                    return;
                }
                self.inbound_udp(pkt, h, &parsed, now, out)
            }
            Class::Fragment => {
                // A fragment may belong to a probe: the responder tracks fragments by
                // (source, destination, IP id). It is forwarded either way.
                if pkt.num_segs() == 1 {
                    self.pmtu
                        .on_inbound_parsed(pkt.head(), &parsed, now, &mut self.replies);
                }
                self.inbound_unmergeable_udp(pkt, parsed, now, out)
            }
            Class::OtherIp => {
                if self.inbound_icmp(&pkt, now) {
                    return; // an error for one of the gateway's own probes
                }
                self.inbound_unmergeable(pkt, parsed, now, out)
            }
            Class::Malformed(wire::Malformed::BadTotalLength) => self.bad_ip_length(true),
            Class::Malformed(_) => self.inbound_unmergeable_udp(pkt, parsed, now, out),
            Class::NonIp => out.push(pkt),
        }
    }

    /// After an inbound RX burst: settles the merge engine, releases expired windows and
    /// caravans. Once per burst, out of the burst loop's code.
    #[inline(never)]
    pub fn end_of_burst(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger.settle(now, out);
        self.poll(now, out);
    }

    /// Releases merge items and caravans whose time has come.
    pub fn poll(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger.poll(now, out);
        self.pmtu.poll(now, &mut self.replies);
        if self.caravans.is_empty() {
            return;
        }
        // Due: opened at least a timeout ago (none is, before the first timeout has passed).
        if let Some(opened_by) = now.checked_sub(self.cfg.caravan_timeout_ns) {
            self.close_caravans_opened_by(Some(opened_by), out);
        }
    }

    /// Emits everything held (shutdown).
    pub fn flush(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger.flush_all(now, out);
        self.close_caravans_opened_by(None, out);
    }

    /// Forgets connections idle for `idle_ns`.
    pub fn expire_connections(&mut self, now: u64, idle_ns: u64) -> usize {
        self.conns.expire(now.saturating_sub(idle_ns))
    }

    // ---- outbound ----

    /// Handles one frame from inside; what goes outside is appended to `out`.
    pub fn outbound(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        self.report.outbound.packets_in += 1;
        self.report.outbound.bytes_in += pkt.len() as u64;
        self.report.sizes.outbound_received.record(pkt.len());
        self.outbound_one(pkt, now, out);
    }

    /// [`outbound`](Self::outbound) without the receive counters (a burst counts them once).
    fn outbound_one(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        // Parsed once here; the caravan unpacker takes the same parse.
        let parsed = Parsed::of(pkt.head(), pkt.len());
        self.outbound_parsed(pkt, &parsed, now, out);
    }

    /// [`outbound_one`](Self::outbound_one) of a packet parsed already (`parsed`, its parse).
    #[inline]
    fn outbound_parsed(&mut self, pkt: B, parsed: &Parsed, now: u64, out: &mut Vec<B>) {
        // By reference: a copy of the headers just written would stall on store forwarding.
        match parsed.class() {
            Class::Tcp(h) => self.outbound_tcp(pkt, parsed, h, now, out),
            Class::Udp(h) => {
                if let Some(ccfg) = self.cfg.caravan {
                    if dscp(pkt.head(), h) == ccfg.dscp {
                        return self.outbound_caravan(pkt, parsed, &ccfg, now, out);
                    }
                }
                // The parse already says how long the IP packet is: a datagram that fits the
                // eMTU leaves without `outbound_fit` reading its IP header again.
                if usize::from(h.ip_len) <= usize::from(self.cfg.emtu) {
                    return out.push(pkt);
                }
                self.outbound_fit(pkt, now, out);
            }
            Class::Malformed(wire::Malformed::BadTotalLength) => self.bad_ip_length(false),
            Class::Malformed(_) | Class::Fragment | Class::OtherIp | Class::NonIp => {
                self.outbound_fit(pkt, now, out)
            }
        }
    }
}
