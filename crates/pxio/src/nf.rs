//! The API a network function embeds (SIGCOMM'26 §4.3 and §7.3: NFs ported with fewer than 50
//! changed lines): a unified `rx` that returns merged packets (with their parsed headers, on
//! request), `poll` for items whose delay window expired, a `tx` that splits to the next hop's
//! MTU and keeps what the driver did not take, and counters.
//!
//! # Receive
//! [`Pxio::rx`] merges a burst and appends the result to a `Vec`. [`Pxio::rx_meta`] does the same
//! and hands each packet out with its [`PacketMeta`]: header offsets, 5-tuple, flow hash and the
//! original segment size, so the NF need not parse again. The plain `rx` computes none of it.
//!
//! # Per-flow opt-in (§4.4, the hairpin policy as an API)
//! [`MergeFilter`] says which flows are merged: all (the default), those with a port in a set,
//! those with an address in a set of prefixes, or those a function picks. Packets of other flows
//! pass through untouched and in order (a flow is never merged, so nothing of it is held).
//!
//! # Transmit
//! [`Pxio::tx`] splits a packet to the configured next-hop MTU (or hands it to TSO) and queues
//! the pieces; [`Pxio::flush_tx`] offers the queue to a [`TxSink`] (a DPDK TX queue, or a `Vec`)
//! and keeps what the sink did not take for the next call, in order. The queue is bounded
//! ([`PxioConfig::tx_queue_limit`]): a packet that finds it full is dropped and counted
//! ([`TxStats::queue_drops`]). A packet that cannot be split is dropped, counted, and the
//! [`SplitError`] returned.
//!
//! # Checksum offload
//! [`PxioConfig::offloads`] is the one place that decides it: [`Pxio::new`] copies
//! `offloads.checksum` into the merge engine's [`MergeConfig::checksum_offload`], so merged and
//! split packets are always prepared the same way.

use std::collections::VecDeque;
use std::net::IpAddr;

use crate::buf::PacketBuf;
use crate::clock::Clock;
use crate::merge::{ConfigError, MergeConfig, MergeStats, Merger};
use crate::rxq::{RxRing, UnifiedRx};
use crate::split::{split_tcp, SplitError, SplitOffloads};
use crate::toeplitz::Toeplitz;
use crate::wire::{self, Class, FlowKey, Headers};

/// Counters of the transmit side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Packets handed to [`Pxio::tx`], [`Pxio::tx_to`] or [`Pxio::enqueue`].
    pub packets_in: u64,
    /// Packets queued for the sink (segments count one each).
    pub packets_out: u64,
    /// Packets that had to be split.
    pub split: u64,
    /// Packets dropped because they could not be split (pool exhausted, MTU too small, bad
    /// checksum).
    pub dropped: u64,
    /// Packets (or segments) dropped because the TX queue was full: the sink did not keep up.
    pub queue_drops: u64,
    /// Packets a sink took.
    pub sent: u64,
}

/// Which flows are merged (SIGCOMM'26 §4.4: merge only the flows whose next hop benefits).
/// Packets of other flows, and non-TCP packets, pass through untouched.
///
/// The choice must be a function of the flow (its 5-tuple): a flow that is merged now and not
/// later would see its held data overtaken.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum MergeFilter {
    /// Every TCP flow (no per-packet cost).
    #[default]
    All,
    /// Flows with this source or destination port (a service).
    Ports(Vec<u16>),
    /// Flows whose source or destination address lies in one of these prefixes.
    Prefixes(Vec<(IpAddr, u8)>),
    /// Flows the function picks.
    Custom(fn(&FlowKey) -> bool),
}

impl std::fmt::Debug for MergeFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::All => f.write_str("All"),
            Self::Ports(p) => f.debug_tuple("Ports").field(p).finish(),
            Self::Prefixes(p) => f.debug_tuple("Prefixes").field(p).finish(),
            Self::Custom(_) => f.write_str("Custom(fn)"),
        }
    }
}

impl MergeFilter {
    /// Whether packets of `key` are merged.
    pub fn selects(&self, key: &FlowKey) -> bool {
        match self {
            Self::All => true,
            Self::Ports(ports) => ports.contains(&key.sport) || ports.contains(&key.dport),
            Self::Prefixes(prefixes) => prefixes.iter().any(|&(net, len)| {
                in_prefix(key, &key.src, net, len) || in_prefix(key, &key.dst, net, len)
            }),
            Self::Custom(f) => f(key),
        }
    }
}

/// Whether `addr` (a [`FlowKey`] address field) lies in `net/len`.
fn in_prefix(key: &FlowKey, addr: &[u8; 16], net: IpAddr, len: u8) -> bool {
    let (net, width): ([u8; 16], u32) = match (net, key.v6) {
        (IpAddr::V4(n), false) => {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&n.octets());
            (a, 32)
        }
        (IpAddr::V6(n), true) => (n.octets(), 128),
        _ => return false,
    };
    let len = u32::from(len).min(width);
    let a = u128::from_be_bytes(*addr);
    let n = u128::from_be_bytes(net);
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    a & mask == n & mask
}

/// What the engine parsed of a packet it hands out ([`Pxio::rx_meta`]): small and `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketMeta {
    /// Header offsets and lengths, protocol, IP and payload length, and the 5-tuple.
    pub hdr: Headers,
    /// The flow hash: the NIC's RSS hash when it gave one, else the Toeplitz hash a NIC with
    /// the default key would give.
    pub hash: u32,
    /// The original segment size: the largest TCP payload of the segments this packet was
    /// merged from (for a packet that was not merged, its own payload), read from its buffer
    /// chain, one buffer per merged segment (an input that already was a chain, LRO-style,
    /// counts per buffer). Splitting to it restores the sender's segment size (§7.3); see
    /// [`PacketMeta::seg_mtu`].
    pub seg_size: u16,
}

impl PacketMeta {
    /// The 5-tuple.
    pub fn key(&self) -> &FlowKey {
        &self.hdr.key
    }

    /// The IP MTU that splits this packet back into its original segments.
    pub fn seg_mtu(&self) -> u16 {
        (self.hdr.l3_len + self.hdr.l4_len).saturating_add(self.seg_size.max(1))
    }
}

/// A received packet and, for TCP and UDP, its parsed headers.
#[derive(Debug)]
pub struct RxPacket<B> {
    /// The packet (merged or passed through).
    pub pkt: B,
    /// Its headers; `None` for anything but well-formed TCP and UDP.
    pub meta: Option<PacketMeta>,
}

/// Settings of the stack. Build it with [`PxioBuilder`] (or [`PxioBuilder::for_ports`]);
/// fields may be added, so it cannot be built with a struct literal.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PxioConfig {
    /// Merging. Its `checksum_offload` is overwritten by `offloads.checksum`.
    pub merge: MergeConfig,
    /// What the TX port can do; the one place that decides checksum offload.
    pub offloads: SplitOffloads,
    /// The next hop's IP MTU that [`Pxio::tx`] splits to (default 1500).
    pub tx_mtu: u16,
    /// Packets [`Pxio::flush_tx`] keeps when the sink does not take them (default 4096).
    pub tx_queue_limit: usize,
    /// Align the iMTU to whole segments of flows with this many IP + TCP header bytes (see
    /// [`PxioBuilder::align_imtu`]); `None` (the default) keeps `merge.imtu` as it is.
    pub align_imtu: Option<u16>,
}

impl Default for PxioConfig {
    fn default() -> Self {
        Self {
            merge: MergeConfig::default(),
            offloads: SplitOffloads::default(),
            tx_mtu: 1500,
            tx_queue_limit: 4096,
            align_imtu: None,
        }
    }
}

/// A configuration [`Pxio`] refuses.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PxioError {
    /// A merge setting out of range.
    #[error(transparent)]
    Merge(#[from] ConfigError),
    /// The TX MTU leaves no room for a TCP payload (IPv4 or IPv6 with bare headers).
    #[error("tx_mtu {0} is invalid: 1280..=65535 (IPv6's minimum MTU)")]
    TxMtu(u16),
    /// A queue limit of 0 (nothing could ever be sent) or one larger than 2^24.
    #[error("tx_queue_limit {0} is invalid: 1..=16777216")]
    TxQueueLimit(usize),
    /// The TX device cannot send chained mbufs, which merged packets and split segments are.
    #[error("the TX device cannot transmit multi-segment mbufs (no MULTI_SEGS offload)")]
    NoMultiSegs,
    /// An iMTU alignment for headers shorter than bare IPv4 + TCP (40 B) or longer than IPv4
    /// and TCP with full options (120 B).
    #[error("align_imtu {0} is invalid: IP + TCP headers are 40..=120 bytes")]
    AlignImtu(u16),
    /// The device could not be queried.
    #[error("device query failed: {0}")]
    Device(String),
}

impl PxioConfig {
    /// Checks every value (the merge settings with [`MergeConfig::validate`]).
    pub fn validate(&self) -> Result<(), PxioError> {
        self.merge.validate()?;
        if self.tx_mtu < 1280 {
            return Err(PxioError::TxMtu(self.tx_mtu));
        }
        if self.tx_queue_limit == 0 || self.tx_queue_limit > 1 << 24 {
            return Err(PxioError::TxQueueLimit(self.tx_queue_limit));
        }
        if let Some(h) = self.align_imtu {
            if !(40..=120).contains(&h) {
                return Err(PxioError::AlignImtu(h));
            }
        }
        Ok(())
    }

    /// The iMTU the merge engine runs with: `merge.imtu`, lowered to `h + k × (tx_mtu − h)`
    /// (the largest such value, k ≥ 1) when [`PxioConfig::align_imtu`] is `Some(h)` and the
    /// iMTU is larger than the TX MTU.
    pub fn effective_imtu(&self) -> u16 {
        let imtu = self.merge.imtu;
        match self.align_imtu {
            Some(h) if imtu > self.tx_mtu && (40..=120).contains(&h) => {
                let seg = u32::from(self.tx_mtu - h);
                let k = (u32::from(imtu) - u32::from(h)) / seg;
                // k >= 1 because imtu > tx_mtu; the result is at most imtu.
                (u32::from(h) + k * seg) as u16
            }
            _ => imtu,
        }
    }
}

/// Builds a [`Pxio`]: every setting has a default, so an NF names only what it changes.
#[derive(Clone, Debug, Default)]
pub struct PxioBuilder {
    cfg: PxioConfig,
    filter: MergeFilter,
}

impl PxioBuilder {
    /// Every setting at its default (see [`PxioConfig`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The internal MTU: the largest packet a merge produces (default 9000).
    pub fn imtu(mut self, imtu: u16) -> Self {
        self.cfg.merge.imtu = imtu;
        self
    }

    /// The next hop's IP MTU [`Pxio::tx`] splits to (default 1500).
    pub fn tx_mtu(mut self, mtu: u16) -> Self {
        self.cfg.tx_mtu = mtu;
        self
    }

    /// What the TX port does: TSO, and IPv4/TCP checksum offload (for merging and splitting
    /// alike).
    pub fn offloads(mut self, offloads: SplitOffloads) -> Self {
        self.cfg.offloads = offloads;
        self
    }

    /// Every merge setting at once (its `checksum_offload` is ignored: see
    /// [`PxioBuilder::offloads`]).
    pub fn merge(mut self, merge: MergeConfig) -> Self {
        self.cfg.merge = merge;
        self
    }

    /// Adaptive delayed merging on or off (on by default).
    pub fn delay(mut self, enabled: bool) -> Self {
        self.cfg.merge.delay.enabled = enabled;
        self
    }

    /// Flows held at once (the flow table's size).
    pub fn flow_capacity(mut self, flows: usize) -> Self {
        self.cfg.merge.flow_capacity = flows;
        self
    }

    /// Packets kept for a sink that did not take them.
    pub fn tx_queue_limit(mut self, limit: usize) -> Self {
        self.cfg.tx_queue_limit = limit;
        self
    }

    /// Lowers the iMTU to a whole number of `tx_mtu`-sized segments of flows whose IP + TCP
    /// headers are `headers` bytes (40: IPv4 without options; 52: with timestamps, Linux's
    /// default; 60 and 72: the same over IPv6), see [`PxioConfig::effective_imtu`].
    ///
    /// Why: the engine cuts a merged packet at exactly the iMTU (Appendix A's partial
    /// stashing), so with the default 9000 a merged packet of 1460 B segments holds 6.1 of
    /// them and splitting it back to 1500 adds a short piece; aligned (8800 for 40 B headers
    /// and a 1500 B TX MTU) it holds 6 and splits into 6 full ones. Flows with other header
    /// sizes are merged and split as before (at most one short piece per merged packet).
    pub fn align_imtu(mut self, headers: u16) -> Self {
        self.cfg.align_imtu = Some(headers);
        self
    }

    /// Merge only the flows `filter` selects.
    pub fn merge_only(mut self, filter: MergeFilter) -> Self {
        self.filter = filter;
        self
    }

    /// The configuration as it stands.
    pub fn config(&self) -> &PxioConfig {
        &self.cfg
    }

    /// The stack, taking new headers from `pool` and time from `clock`; refuses a bad
    /// configuration with a typed error.
    pub fn build<B: PacketBuf, C: Clock>(
        self,
        pool: B::Pool,
        clock: C,
    ) -> Result<Pxio<B, C>, PxioError> {
        let mut px = Pxio::new(self.cfg, pool, clock)?;
        px.filter = self.filter;
        Ok(px)
    }
}

#[cfg(feature = "dpdk")]
impl PxioBuilder {
    /// Settings derived from the ports an NF receives on (`rx`) and transmits on (`tx`):
    /// - the TX MTU is `tx`'s MTU;
    /// - TSO and checksum offload as `tx` granted them (checksum offload needs both IPv4 and
    ///   TCP checksums);
    /// - a merged packet has at most as many segments as `tx` sends in one packet (when TSO
    ///   hands it whole to the NIC), and at most 64;
    /// - the iMTU is 9000, or less when `rx` receives less (a merged packet is never larger
    ///   than what the NF's own ports could carry whole).
    ///
    /// Refuses a TX device without multi-segment transmit.
    pub fn for_ports(rx: &dpdk::Port, tx: &dpdk::Port) -> Result<Self, PxioError> {
        use dpdk::TxOffloads as T;
        let dev = |e: dpdk::Error| PxioError::Device(e.to_string());
        let tx_info = tx.device_info().map_err(dev)?;
        let rx_info = rx.device_info().map_err(dev)?;
        if !tx_info.multi_segs_tx() {
            return Err(PxioError::NoMultiSegs);
        }
        let granted = tx.tx_offloads();
        let offloads = SplitOffloads {
            tso: granted.contains(T::TCP_TSO),
            checksum: granted.contains(T::IPV4_CKSUM | T::TCP_CKSUM),
        };
        let mut b = PxioBuilder::new()
            .tx_mtu(tx.mtu().map_err(dev)?)
            .offloads(offloads)
            .imtu(9000u16.min(rx_info.mtu_limit()).max(1280));
        let seg_max = tx_info.tx_desc.nb_seg_max;
        if seg_max >= 2 {
            b.cfg.merge.max_segs = b.cfg.merge.max_segs.min(seg_max);
        }
        Ok(b)
    }
}

/// Where [`Pxio::flush_tx`] sends: it takes packets from the front of `queue`, in order, and
/// leaves what it did not take.
pub trait TxSink<B> {
    /// Takes as many packets from the front of `queue` as it can; returns how many.
    fn send(&mut self, queue: &mut VecDeque<B>) -> usize;
}

/// A `Vec` takes everything (tests, and NFs that hand packets on in software).
impl<B> TxSink<B> for Vec<B> {
    fn send(&mut self, queue: &mut VecDeque<B>) -> usize {
        let n = queue.len();
        self.extend(queue.drain(..));
        n
    }
}

#[cfg(feature = "dpdk")]
impl TxSink<dpdk::Mbuf> for dpdk::TxQueue {
    /// Offers the queue in bursts of 32; the driver takes the first `n` of each
    /// ([`dpdk::TxQueue::tx_burst`]), the rest go back to the front of the queue, in order.
    fn send(&mut self, queue: &mut VecDeque<dpdk::Mbuf>) -> usize {
        let mut burst = dpdk::Burst::<32>::new();
        let mut sent = 0;
        while !queue.is_empty() {
            while !burst.is_full() {
                let Some(m) = queue.pop_front() else { break };
                if let Err(m) = burst.push(m) {
                    queue.push_front(m);
                    break;
                }
            }
            let offered = burst.len();
            let n = self.tx_burst(&mut burst);
            sent += n;
            if n < offered {
                // What the driver left stays ours: back to the front, in order.
                let rest: Vec<dpdk::Mbuf> = burst.drain().collect();
                for m in rest.into_iter().rev() {
                    queue.push_front(m);
                }
                break;
            }
        }
        sent
    }
}

/// PXIO for one worker: merge on receive, split on transmit.
pub struct Pxio<B: PacketBuf, C: Clock> {
    merger: Merger<B>,
    clock: C,
    offloads: SplitOffloads,
    tx_mtu: u16,
    tx_limit: usize,
    filter: MergeFilter,
    queue: VecDeque<B>,
    scratch: Vec<B>,
    toeplitz: Toeplitz,
    tx: TxStats,
}

impl<B: PacketBuf, C: Clock> Pxio<B, C> {
    /// A stack with `cfg` (merging every flow); new headers come from `pool`, time from `clock`.
    pub fn new(mut cfg: PxioConfig, pool: B::Pool, clock: C) -> Result<Self, PxioError> {
        cfg.merge.checksum_offload = cfg.offloads.checksum;
        cfg.validate()?;
        cfg.merge.imtu = cfg.effective_imtu();
        Ok(Self {
            merger: Merger::new(cfg.merge, pool)?,
            clock,
            offloads: cfg.offloads,
            tx_mtu: cfg.tx_mtu,
            tx_limit: cfg.tx_queue_limit,
            filter: MergeFilter::All,
            queue: VecDeque::with_capacity(cfg.tx_queue_limit.min(8192)),
            scratch: Vec::new(),
            toeplitz: Toeplitz::default(),
            tx: TxStats::default(),
        })
    }

    /// Merges a burst of received packets; merged (and passed-through) packets are appended to
    /// `out`. Expired delayed items are released first.
    pub fn rx(&mut self, pkts: impl IntoIterator<Item = B>, out: &mut Vec<B>) {
        let now = self.clock.now_ns();
        self.merger.poll(now, out);
        if matches!(self.filter, MergeFilter::All) {
            self.merger.rx_burst(pkts, now, out);
            return;
        }
        for pkt in pkts {
            self.rx_one(pkt, now, out);
        }
        self.merger.settle(now, out);
    }

    /// One packet through the filter (the slow path of `rx`).
    fn rx_one(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        match wire::classify(pkt.head(), pkt.len()) {
            Class::Tcp(h) => {
                if self.filter.selects(&h.key) {
                    self.merger.rx(pkt, now, out);
                } else {
                    out.push(pkt);
                }
            }
            // Fragments and extension headers of a merged flow must follow its held data: the
            // engine orders them. Everything else is never merged.
            Class::Fragment | Class::OtherIp | Class::Malformed(_) => self.merger.rx(pkt, now, out),
            Class::Udp(_) | Class::NonIp => out.push(pkt),
        }
    }

    /// [`Pxio::rx`], handing each packet out with its parsed headers. The headers are read
    /// once per packet handed out (merged packets are few); an NF that only calls `rx` pays
    /// for none of it.
    pub fn rx_meta(&mut self, pkts: impl IntoIterator<Item = B>, out: &mut Vec<RxPacket<B>>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.rx(pkts, &mut scratch);
        self.annotate(&mut scratch, out);
        self.scratch = scratch;
    }

    /// [`Pxio::poll`], with parsed headers.
    pub fn poll_meta(&mut self, out: &mut Vec<RxPacket<B>>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.poll(&mut scratch);
        self.annotate(&mut scratch, out);
        self.scratch = scratch;
    }

    /// [`Pxio::flush`], with parsed headers (shutdown, or the end of a finite input).
    pub fn flush_meta(&mut self, out: &mut Vec<RxPacket<B>>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.flush(&mut scratch);
        self.annotate(&mut scratch, out);
        self.scratch = scratch;
    }

    /// The headers of `pkt`, as [`Pxio::rx_meta`] reports them.
    pub fn meta_of(&self, pkt: &B) -> Option<PacketMeta> {
        let hdr = match wire::classify(pkt.head(), pkt.len()) {
            Class::Tcp(h) | Class::Udp(h) => h,
            _ => return None,
        };
        let hash = pkt
            .rss_hash()
            .unwrap_or_else(|| hdr.key.rss_hash(&self.toeplitz));
        // A merged packet chains its segments' buffers: the first holds the headers and the
        // first payload, each later one the payload of one input segment (or part of one, when
        // the engine cut it at the iMTU). The largest is the sender's segment size.
        let mut seg_size = 0u16;
        let mut first = true;
        let hdr_len = hdr.hdr_len();
        let mut left = usize::from(hdr.payload_len);
        pkt.for_each_segment(|s| {
            let n = if first {
                s.len().saturating_sub(hdr_len)
            } else {
                s.len()
            }
            .min(left);
            first = false;
            left -= n;
            seg_size = seg_size.max(n as u16);
        });
        Some(PacketMeta {
            hdr,
            hash,
            seg_size,
        })
    }

    fn annotate(&self, pkts: &mut Vec<B>, out: &mut Vec<RxPacket<B>>) {
        out.extend(pkts.drain(..).map(|pkt| {
            let meta = self.meta_of(&pkt);
            RxPacket { pkt, meta }
        }));
    }

    /// The unified RX of §4.3 (`px_eth_rx_burst`) over a worker's share of a port's queues
    /// ([`UnifiedRx`], which follows the active queue configuration): reads them into `scratch`,
    /// merges, and appends the result to `out`. Returns how many packets were read. `scratch` is
    /// emptied again, so once it has grown nothing is allocated.
    pub fn rx_unified<R: RxRing<Pkt = B>>(
        &mut self,
        queues: &mut UnifiedRx<R>,
        scratch: &mut Vec<B>,
        out: &mut Vec<B>,
    ) -> usize {
        let n = queues.rx_burst(scratch);
        self.rx(scratch.drain(..), out);
        n
    }

    /// Releases delayed items whose window has passed. Call it when a poll loop finds no
    /// packets, so nothing waits longer than its window.
    pub fn poll(&mut self, out: &mut Vec<B>) {
        let now = self.clock.now_ns();
        self.merger.poll(now, out);
    }

    /// Queues `pkt` for the configured next hop ([`PxioConfig::tx_mtu`]): TCP larger than that
    /// is split (or handed to TSO). Returns how many packets were queued.
    ///
    /// With software checksums, the packet's TCP checksum is verified before the pieces are
    /// checksummed, unless [`PacketBuf::l4_csum_verdict`] vouches for it: an NF that changed
    /// covered bytes without updating the checksum field clears that first
    /// (`pkt.set_l4_csum_verdict(None)`).
    ///
    /// # Errors
    /// A packet that cannot be split is dropped, counted in [`TxStats::dropped`], and the reason
    /// returned.
    pub fn tx(&mut self, pkt: B) -> Result<usize, SplitError> {
        self.tx_to(pkt, self.tx_mtu)
    }

    /// [`Pxio::tx`] toward a next hop with IP MTU `mtu`.
    ///
    /// # Errors
    /// As for [`Pxio::tx`].
    pub fn tx_to(&mut self, pkt: B, mtu: u16) -> Result<usize, SplitError> {
        self.tx.packets_in += 1;
        let mut pieces = std::mem::take(&mut self.scratch);
        let r = self.split_into(pkt, mtu, &mut pieces);
        for p in pieces.drain(..) {
            self.push_queue(p);
        }
        self.scratch = pieces;
        r
    }

    /// Splits `pkt` to `mtu` into `out` without queueing it, for an NF that transforms each
    /// segment before sending (a UPF encapsulating in GTP-U, say); send the pieces with
    /// [`Pxio::enqueue`]. Counted in [`TxStats::split`] and [`TxStats::dropped`].
    ///
    /// # Errors
    /// The packet could not be split: it was dropped and counted.
    pub fn split(&mut self, pkt: B, mtu: u16, out: &mut Vec<B>) -> Result<usize, SplitError> {
        self.split_into(pkt, mtu, out)
    }

    fn split_into(&mut self, pkt: B, mtu: u16, out: &mut Vec<B>) -> Result<usize, SplitError> {
        match split_tcp(pkt, mtu, self.offloads, self.merger.pool(), out) {
            Ok(n) => {
                if n > 1 {
                    self.tx.split += 1;
                }
                Ok(n)
            }
            Err((e, pkt)) => {
                self.tx.dropped += 1;
                drop(pkt);
                Err(e)
            }
        }
    }

    /// Queues `pkt` as it is (no split). Returns false when the queue was full: the packet was
    /// dropped and counted in [`TxStats::queue_drops`].
    pub fn enqueue(&mut self, pkt: B) -> bool {
        self.tx.packets_in += 1;
        self.push_queue(pkt)
    }

    fn push_queue(&mut self, pkt: B) -> bool {
        if self.queue.len() >= self.tx_limit {
            self.tx.queue_drops += 1;
            return false;
        }
        self.tx.packets_out += 1;
        self.queue.push_back(pkt);
        true
    }

    /// Offers the TX queue to `sink`; what it does not take stays queued, in order, for the
    /// next call. Returns how many it took.
    pub fn flush_tx(&mut self, sink: &mut impl TxSink<B>) -> usize {
        let n = sink.send(&mut self.queue);
        self.tx.sent += n as u64;
        n
    }

    /// The earliest pending delay deadline (ns on the stack's clock), if any: when a poll loop
    /// with nothing to receive should call [`Pxio::poll`] next.
    pub fn next_deadline(&self) -> Option<u64> {
        self.merger.next_deadline()
    }

    /// Packets waiting in the TX queue.
    pub fn tx_pending(&self) -> usize {
        self.queue.len()
    }

    /// Emits everything still held by the merge engine (shutdown).
    pub fn flush(&mut self, out: &mut Vec<B>) {
        let now = self.clock.now_ns();
        self.merger.flush_all(now, out);
    }

    /// Receive-side counters: packets in/out, conversion yield, held items, added delay.
    pub fn rx_stats(&self) -> &MergeStats {
        self.merger.stats()
    }

    /// Transmit-side counters.
    pub fn tx_stats(&self) -> &TxStats {
        &self.tx
    }

    /// The merge settings in force.
    pub fn merge_config(&self) -> &MergeConfig {
        self.merger.config()
    }

    /// The TX offloads in force.
    pub fn offloads(&self) -> SplitOffloads {
        self.offloads
    }

    /// The pool new headers come from (an NF building its own headers, e.g. for encapsulation,
    /// may share it).
    pub fn pool(&self) -> &B::Pool {
        self.merger.pool()
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(feature = "dpdk")]
impl Pxio<dpdk::Mbuf, crate::clock::TscClock> {
    /// [`PxioBuilder::for_ports`]: settings derived from the ports an NF receives on and
    /// transmits on, as `Pxio::for_ports(&rx, &tx)?.build(pool, clock)`.
    pub fn for_ports(rx: &dpdk::Port, tx: &dpdk::Port) -> Result<PxioBuilder, PxioError> {
        PxioBuilder::for_ports(rx, tx)
    }
}

#[cfg(feature = "dpdk")]
impl<C: Clock> Pxio<dpdk::Mbuf, C> {
    /// The unified RX of §4.3: reads every queue of `queues` once into `burst`, merges, and
    /// appends the result to `out`. Returns how many packets were read.
    ///
    /// On DPDK ports only (the `dpdk` feature).
    pub fn rx_queues<const N: usize>(
        &mut self,
        queues: &mut [dpdk::RxQueue],
        burst: &mut dpdk::Burst<N>,
        out: &mut Vec<dpdk::Mbuf>,
    ) -> usize {
        let now = self.clock.now_ns();
        self.merger.poll(now, out);
        let plain = matches!(self.filter, MergeFilter::All);
        let mut read = 0;
        for q in queues.iter_mut() {
            read += q.rx_burst(burst);
            for m in burst.drain() {
                if plain {
                    self.merger.rx(m, now, out);
                } else {
                    self.rx_one(m, now, out);
                }
            }
        }
        self.merger.settle(now, out);
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(v6: bool, src: [u8; 16], sport: u16, dport: u16) -> FlowKey {
        FlowKey {
            src,
            dst: [0; 16],
            sport,
            dport,
            proto: wire::ip_proto::TCP,
            v6,
        }
    }

    #[test]
    fn filters_select_by_port_and_prefix_for_both_families() {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&[10, 1, 2, 3]);
        let v6: [u8; 16] = "2001:db8::7"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets();
        let ports = MergeFilter::Ports(vec![443]);
        assert!(ports.selects(&key(false, v4, 5000, 443)));
        assert!(!ports.selects(&key(false, v4, 5000, 80)));
        let nets = MergeFilter::Prefixes(vec![
            ("10.1.0.0".parse().unwrap(), 16),
            ("2001:db8::".parse().unwrap(), 32),
        ]);
        assert!(nets.selects(&key(false, v4, 1, 2)));
        assert!(nets.selects(&key(true, v6, 1, 2)));
        let mut other = [0u8; 16];
        other[..4].copy_from_slice(&[10, 2, 0, 1]);
        assert!(!nets.selects(&key(false, other, 1, 2)));
        // An IPv4 prefix never matches an IPv6 key whose bytes happen to agree.
        let mut v6_like = [0u8; 16];
        v6_like[..4].copy_from_slice(&[10, 1, 9, 9]);
        assert!(!nets.selects(&key(true, v6_like, 1, 2)));
        assert!(MergeFilter::Custom(|k| k.dport == 80).selects(&key(false, v4, 1, 80)));
    }

    #[test]
    fn packet_meta_stays_small() {
        // Handed out with every packet: it must stay a few cache-line words, and Copy.
        assert!(
            std::mem::size_of::<PacketMeta>() <= 64,
            "{}",
            std::mem::size_of::<PacketMeta>()
        );
    }

    #[test]
    fn bad_tx_settings_are_refused_with_typed_errors() {
        let b = PxioBuilder::new().tx_mtu(600);
        let r = b.build::<crate::HeapBuf, _>(crate::HeapPool::new(256), crate::ManualClock::new(0));
        assert!(matches!(r, Err(PxioError::TxMtu(600))));
        let b = PxioBuilder::new().tx_queue_limit(0);
        let r = b.build::<crate::HeapBuf, _>(crate::HeapPool::new(256), crate::ManualClock::new(0));
        assert!(matches!(r, Err(PxioError::TxQueueLimit(0))));
        let b = PxioBuilder::new().imtu(100);
        let r = b.build::<crate::HeapBuf, _>(crate::HeapPool::new(256), crate::ManualClock::new(0));
        assert!(matches!(
            r,
            Err(PxioError::Merge(ConfigError { key: "imtu", .. }))
        ));
    }
}
