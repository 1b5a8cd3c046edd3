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

use std::collections::HashMap;

use pxio::caravan::{self, CaravanBuilder, CaravanConfig, CaravanError};
use pxio::merge::Merger;
use pxio::split::{split_tcp_parsed, SplitOffloads};
use pxio::wire::{self, Class, FlowKey, Headers, Parsed};
use pxio::PacketBuf;

use std::net::IpAddr;

use crate::config::{CaravanFamily, Config, Icmp as IcmpConfig, PmtuPolicy};
use crate::conn::{self, ConnTable};
use crate::fragmenter::fragment_ipv4;
use crate::icmp::{self as icmp_err, RateLimiter};
use crate::mss;
use crate::pmtud::PathMtu;
use crate::stats::Report;

/// An untagged Ethernet header.
const ETH_HLEN: usize = 14;
/// An Ethernet header with one VLAN tag: what a frame may add to its link's MTU.
const VLAN_ETH_HLEN: usize = 18;
/// Open caravans at once, per worker.
const MAX_OPEN_CARAVANS: usize = 1024;
/// Half-open connections remembered, per worker (oldest evicted: `crate::conn`).
const MAX_HALF_OPEN: usize = 65536;
/// Connections being learned from their data, per worker (oldest evicted: `crate::conn`).
const MAX_LEARNING: usize = 16384;
/// Connections learned one way (`[connections] one_way`), per worker (oldest evicted).
const MAX_ONE_WAY: usize = 16384;

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
    caravans: HashMap<FlowKey, (Open<B>, u64)>,
    expired: Vec<FlowKey>,
    pool: B::Pool,
    report: Report,
    pmtu: PathMtu,
    /// Frames the gateway itself sends outside (F-PMTUD probes and reports).
    replies: Vec<Vec<u8>>,
    /// Frames the gateway itself sends inside (ICMP errors).
    inside_replies: Vec<Vec<u8>>,
    /// The ICMP error rate limits.
    limiter: RateLimiter,
}

/// What an inbound UDP flow holds: one datagram, kept as it came until a second one joins it (a
/// caravan of one is never built: `docs/caravan.md`, "Single datagrams"), or an open caravan.
enum Open<B: PacketBuf> {
    /// A lone datagram and its parse (handed to the caravan builder when a second datagram
    /// joins it).
    Lone(B, Parsed),
    /// A caravan of at least two.
    Caravan(CaravanBuilder<B>),
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
    exclude: Vec<u16>,
    /// Pack IPv4 and IPv6 UDP (`[caravan] families`).
    caravan_families: (bool, bool),
    pass_ttl: u8,
    policy: PmtuPolicy,
    fallback: PmtuPolicy,
    conservative: u16,
    offloads: SplitOffloads,
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
        Ok(Self {
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
                exclude: cfg.caravan.exclude_ports.clone(),
                caravan_families: (
                    cfg.caravan.families.contains(&CaravanFamily::Ipv4),
                    cfg.caravan.families.contains(&CaravanFamily::Ipv6),
                ),
                pass_ttl: cfg.caravan.pass_ttl,
                policy: cfg.pmtu.policy,
                fallback: cfg.pmtu.fallback,
                conservative: cfg.pmtu.conservative_mtu,
                offloads: offloads.outside,
                icmp: cfg.icmp.clone(),
                learn_ptb: cfg.pmtu.learn_ptb,
                blackhole_retransmits: cfg.pmtu.blackhole_retransmits,
                blackhole_window_ns: cfg.pmtu.blackhole_window_ms.saturating_mul(1_000_000),
                blackhole_mtu: cfg.pmtu.blackhole_mtu,
            },
            merger: Merger::new(merge_cfg, merge_pool)?,
            conns: {
                let t = ConnTable::new(cfg.connections.max, MAX_HALF_OPEN, MAX_LEARNING);
                if cfg.connections.one_way {
                    t.with_one_way(MAX_ONE_WAY)
                } else {
                    t
                }
            },
            caravans: HashMap::with_capacity(MAX_OPEN_CARAVANS),
            expired: Vec::with_capacity(MAX_OPEN_CARAVANS),
            pool,
            report: Report::default(),
            pmtu: PathMtu::from_config(cfg)?,
            replies: Vec::with_capacity(64),
            inside_replies: Vec::with_capacity(64),
            limiter: RateLimiter::new(&cfg.icmp, 0),
        })
    }

    /// The counters so far (merge and delay figures included).
    pub fn report(&self) -> Report {
        let mut r = self.report.clone();
        let s = self.merger.stats();
        r.merge.payload_in = s.payload_in;
        r.merge.payload_full = s.payload_full;
        r.merge.merges = s.merges;
        r.merge.cuts = s.cuts;
        r.merge.held_items = s.held_items;
        r.delay_ns = Some(s.delay_ns.clone());
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
        r.pmtud_paths = self.pmtu.paths().to_vec();
        r.finish();
        r
    }

    /// Counts a frame sent toward the inside (`inbound`) or the outside.
    pub fn count_sent(&mut self, inbound: bool, bytes: usize) {
        let d = if inbound {
            &mut self.report.inbound
        } else {
            &mut self.report.outbound
        };
        d.packets_out += 1;
        d.bytes_out += bytes as u64;
        d.max_frame_out = d.max_frame_out.max(bytes as u64);
        let sizes = &mut self.report.sizes;
        if inbound {
            &mut sizes.inbound_sent
        } else {
            &mut sizes.outbound_sent
        }
        .record(bytes);
    }

    /// Counts frames the TX queue would not take (freed unsent).
    pub fn count_tx_dropped(&mut self, n: u64) {
        self.report.drops.tx_dropped += n;
    }

    /// When the next merge, caravan or probe deadline falls due, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let caravan = self
            .caravans
            .values()
            .map(|(_, t)| t + self.cfg.caravan_timeout_ns)
            .min();
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
        let mut frames = std::mem::take(&mut self.replies);
        // ICMP errors sent inside are counted by the router counters instead.
        self.report.gateway_frames.sent += frames.len() as u64;
        self.frames_to_bufs(&mut frames, out);
        self.replies = frames;
    }

    /// Moves the frames the gateway itself sends inside (ICMP errors) to `out`, as
    /// [`take_replies`](Self::take_replies) does.
    pub fn take_inside_replies(&mut self, out: &mut Vec<B>) {
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

    /// Whether anything is held.
    pub fn holding(&self) -> bool {
        self.merger.stats().held_items > 0 || !self.caravans.is_empty()
    }

    // ---- bursts ----

    /// Handles one RX burst from outside, whole; what goes inside is appended to `out`. The
    /// burst ends settled: what the merge engine does not hold for a delay window, and what the
    /// caravans' and probes' timers release, is in `out`.
    pub fn inbound_burst(&mut self, pkts: impl IntoIterator<Item = B>, now: u64, out: &mut Vec<B>) {
        for pkt in pkts {
            self.inbound(pkt, now, out);
        }
        self.end_of_burst(now, out);
    }

    /// Handles one RX burst from inside, whole; what goes outside is appended to `out`.
    pub fn outbound_burst(
        &mut self,
        pkts: impl IntoIterator<Item = B>,
        now: u64,
        out: &mut Vec<B>,
    ) {
        for pkt in pkts {
            self.outbound(pkt, now, out);
        }
    }

    // ---- inbound ----

    /// Handles one frame from outside; what goes inside is appended to `out`.
    pub fn inbound(&mut self, mut pkt: B, now: u64, out: &mut Vec<B>) {
        self.report.inbound.packets_in += 1;
        self.report.inbound.bytes_in += pkt.len() as u64;
        self.report.sizes.inbound_received.record(pkt.len());
        if !self.inbound_unmark(&mut pkt) {
            return;
        }
        // Only a frame longer than an untagged iMTU frame can hold an IP packet above the iMTU:
        // the common case costs one comparison.
        let imtu = usize::from(self.cfg.imtu);
        if pkt.len() > imtu + ETH_HLEN {
            match ip_layout(pkt.head()) {
                Some(ip) if ip.len > imtu => return self.inbound_oversize(pkt, ip, now, out),
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
        match *parsed.class() {
            Class::Tcp(h) => {
                let key = conn::inbound_key(&h.key);
                let seg = conn::Segment::parse(pkt.head(), &h);
                if let Some(seg) = seg.filter(|s| s.syn) {
                    self.inbound_syn(&mut pkt, &h, &seg, now);
                }
                let known = match seg {
                    _ if self.conns.on_outside(&key, seg.as_ref(), now) => true,
                    // A segment that completes a half-open connection makes it known.
                    Some(seg) if !seg.syn => {
                        self.conns.on_segment(&key, &seg, true, now) == conn::Outcome::Established
                    }
                    _ => false,
                };
                if self.cfg.merge && known {
                    // A SYN's MSS rewrite above keeps every length: the parse still fits (and
                    // the engine parses again if it did not).
                    self.merger.rx_parsed(pkt, parsed, now, out);
                } else {
                    out.push(pkt);
                }
            }
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
                self.inbound_udp(pkt, &h, &parsed, now, out)
            }
            Class::Fragment => {
                // A fragment may belong to a probe: the responder tracks fragments by
                // (source, destination, IP id). It is forwarded either way.
                if pkt.num_segs() == 1 {
                    self.pmtu
                        .on_inbound_parsed(pkt.head(), &parsed, now, &mut self.replies);
                }
                self.inbound_unmergeable(pkt, parsed, now, out)
            }
            Class::OtherIp => {
                if self.inbound_icmp(&pkt, now) {
                    return; // an error for one of the gateway's own probes
                }
                self.inbound_unmergeable(pkt, parsed, now, out)
            }
            Class::Malformed(_) => self.inbound_unmergeable(pkt, parsed, now, out),
            Class::NonIp => out.push(pkt),
        }
    }

    /// An inbound IP packet larger than the iMTU, handled as a router in front of the b-network
    /// would, rather than sent into a network that cannot carry it: IPv4 with DF clear is
    /// fragmented to the iMTU (the fragments go the way every fragment goes, after whatever
    /// their flow holds); IPv4 with DF set and IPv6 are dropped, counted, and answered toward the
    /// outside sender with "fragmentation needed" or Packet Too Big carrying the iMTU,
    /// rate-limited as the outbound errors are.
    fn inbound_oversize(&mut self, pkt: B, ip: IpLayout, now: u64, out: &mut Vec<B>) {
        let imtu = self.cfg.imtu;
        if !ip.v6 && !ip.dont_frag {
            let mut frags = Vec::new();
            match fragment_ipv4(&pkt, ip.l2_len, imtu, &self.pool, &mut frags) {
                Ok(n) => {
                    drop(pkt);
                    self.report.inbound_oversize.fragmented += 1;
                    self.report.inbound_oversize.fragments_out += n as u64;
                    for frag in frags {
                        let parsed = Parsed::of(frag.head(), frag.len());
                        self.inbound_unmergeable(frag, parsed, now, out);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "oversize inbound IPv4 packet not fragmented");
                    self.report.drops.oversize_inbound += 1;
                }
            }
            return;
        }
        self.report.drops.oversize_inbound += 1;
        let counts = &mut self.report.inbound_oversize;
        if !self.cfg.icmp.enabled {
            counts.icmp_suppressed += 1;
            return;
        }
        match icmp_err::too_big(&pkt, imtu, &self.cfg.icmp) {
            Ok(frame) if self.limiter.allow(ip.src, now) => {
                if ip.v6 {
                    counts.ptb_sent += 1;
                } else {
                    counts.frag_needed_sent += 1;
                }
                self.replies.push(frame);
            }
            Ok(_) => counts.icmp_rate_limited += 1,
            Err(_) => counts.icmp_suppressed += 1,
        }
    }

    /// Clears the caravan mark of an inbound frame, whatever it is: the mark is the gateway's to
    /// give (inside hosts' decapsulators trust it), and an outsider's pre-formed caravan must
    /// reach the inside as the ordinary datagram it is. This runs before any other inbound
    /// step, so no path (caravans off, excluded ports, fragments, other protocols, malformed
    /// headers, oversize packets) lets the mark through. False when the frame must be dropped
    /// (counted): it wears the mark, or may, and cannot be rewritten (shared data, or a first
    /// buffer too short to hold the IP header's first bytes).
    fn inbound_unmark(&mut self, pkt: &mut B) -> bool {
        use wire::ethernet::ethertype;
        let chained = pkt.num_segs() > 1;
        let head = pkt.head();
        let (l3, v6) = match wire::EthernetFrame::new_checked(head) {
            Ok(eth) => match eth.ethertype() {
                ethertype::IPV4 => (eth.header_len(), false),
                ethertype::IPV6 => (eth.header_len(), true),
                _ => return true,
            },
            // A runt, whole: not IP. A chain whose first buffer does not even hold the Ethernet
            // header: what it is cannot be told.
            Err(_) if !chained => return true,
            Err(_) => return self.mark_uncleared(),
        };
        match dscp_at(head, l3, v6) {
            Some(dscp) if dscp != self.cfg.mark => return true,
            // Too short to hold the IP header's first bytes, whole: not IP enough to carry it.
            None if !chained => return true,
            // Marked; or a chain whose first buffer does not hold the DSCP.
            _ => {}
        }
        match pkt.head_mut() {
            Some(frame) if frame.len() >= l3 + dscp_span(v6) => {
                clear_dscp(frame, l3, v6);
                self.report.caravan.mark_cleared += 1;
                true
            }
            _ => self.mark_uncleared(),
        }
    }

    /// Counts an inbound frame dropped because it wears the caravan mark, or may, and the mark
    /// cannot be cleared; false, for [`inbound_unmark`](Self::inbound_unmark).
    fn mark_uncleared(&mut self) -> bool {
        self.report.drops.mark_uncleared += 1;
        false
    }

    /// An ICMP or ICMPv6 error from outside. Returns true when it answers one of the gateway's
    /// own F-PMTUD probes (then it is consumed: the inside host never sent that probe). A Packet
    /// Too Big ("fragmentation needed" for IPv4) quoting a segment of a connection the gateway
    /// knows caps the split size toward the quoted destination; it is still forwarded.
    fn inbound_icmp(&mut self, pkt: &B, now: u64) -> bool {
        let Some(err) = quoted_error(pkt.head()) else {
            return false;
        };
        if err.proto == wire::ip_proto::UDP
            && !err.v6
            && self.pmtu.is_own_probe(err.sport, err.dport)
        {
            self.report.router.probe_errors_consumed += 1;
            return true;
        }
        let Some(mtu) = err.too_big else {
            return false;
        };
        let Some(seq) = err.tcp_seq.filter(|_| self.cfg.learn_ptb) else {
            return false;
        };
        // An endpoint believes the error only when it quotes a segment it may have in flight
        // (RFC 5927 §4.1, Linux's tcp_v4_err); so does the gateway, on the inside host's behalf.
        let floor = self.split_floor(err.v6);
        let router = &mut self.report.router;
        match self
            .conns
            .check_quoted(&conn::reverse(&err.flow()), seq, now)
        {
            conn::Quoted::InFlight => {}
            conn::Quoted::OutOfWindow => {
                router.ptb_out_of_window += 1;
                return false;
            }
            conn::Quoted::Unknown => {
                router.ptb_unknown += 1;
                return false;
            }
        }
        // Below the floor the gateway never splits (`split_floor`); IPv6 never below its
        // minimum MTU (RFC 8201 §4). Linux ignores such an MTU for IPv6 too and clamps IPv4 to
        // its own floor (`ip_rt_min_pmtu`): either way the path MTU is not lowered by it.
        if mtu < floor {
            router.ptb_below_floor += 1;
            return false;
        }
        if self.pmtu.cap(err.dst, mtu, now) {
            self.report.router.ptb_learned += 1;
            tracing::info!(dst = %err.dst, mtu, "path MTU learned from an ICMP error");
        }
        false
    }

    /// A packet that is never merged but may belong to a TCP flow with held segments (IPv6
    /// extension headers, a first fragment, a malformed TCP header): the merger passes it on
    /// after that flow's held data, so the flow's order is kept.
    fn inbound_unmergeable(&mut self, pkt: B, parsed: Parsed, now: u64, out: &mut Vec<B>) {
        if self.cfg.merge {
            self.merger.rx_parsed(pkt, parsed, now, out);
        } else {
            out.push(pkt);
        }
    }

    /// The smallest MSS the gateway raises toward the inside host (`[mss] min`, `min_v6`).
    fn mss_floor(&self, v6: bool) -> u16 {
        if v6 {
            self.cfg.mss_floor.1
        } else {
            self.cfg.mss_floor.0
        }
    }

    /// The smallest IP packet the gateway splits to: the MSS floor's. Whatever the path MTU
    /// hints say (an MSS, a Packet Too Big, F-PMTUD, the black-hole fallback), no outside host
    /// can make the gateway cut a segment into more pieces than this.
    fn split_floor(&self, v6: bool) -> u16 {
        self.mss_floor(v6).saturating_add(mss::overhead(v6))
    }

    /// An outside SYN or SYN-ACK. Its MSS is raised to the iMTU's, so the inside host sends
    /// large segments that the gateway splits on the way out; but not when it is below the
    /// floor (`[mss] min`): an outside host announcing a tiny MSS (8 B, say) would otherwise
    /// have the gateway cut each large segment into a thousand frames, where the inside host's
    /// own TCP would never send below its own floor (Linux's `tcp_min_snd_mss`, 48 B). Left as
    /// it is, that MSS reaches the inside host, which segments and checks for itself.
    fn inbound_syn(&mut self, pkt: &mut B, h: &Headers, seg: &conn::Segment, now: u64) {
        self.report.mss.handshakes += 1;
        let v6 = h.key.v6;
        let announced = mss::read(pkt.head(), h);
        let below_floor = announced.is_some_and(|m| m < self.mss_floor(v6));
        self.report.mss.below_floor += u64::from(below_floor);
        let target = (self.cfg.mss_rewrite && !below_floor)
            .then(|| self.cfg.imtu.saturating_sub(mss::overhead(v6)));
        if let Some(frame) = pkt.head_mut() {
            let hs = mss::rewrite(frame, h, target, true);
            self.report.mss.rewritten += u64::from(hs.rewritten.is_some());
        }
        self.report.mss.without_mss += u64::from(announced.is_none());
        let pmtu = match self.cfg.policy {
            PmtuPolicy::Mss => match announced {
                Some(_) => mss::pmtu_from_mss(announced, v6, self.cfg.emtu),
                None => self.fallback_pmtu(),
            },
            _ => self.fallback_pmtu_for(self.cfg.policy),
        };
        // A SYN from outside only makes a half-open connection; a SYN-ACK that acknowledges
        // the inside host's SYN completes one; neither changes an established one
        // (`crate::conn`).
        self.conns
            .on_handshake(conn::inbound_key(&h.key), seg, true, Some(pmtu), now);
    }

    fn fallback_pmtu(&self) -> u16 {
        self.fallback_pmtu_for(self.cfg.fallback)
    }

    fn fallback_pmtu_for(&self, policy: PmtuPolicy) -> u16 {
        match policy {
            PmtuPolicy::Conservative => self.cfg.conservative,
            _ => self.cfg.emtu,
        }
    }

    /// An inbound UDP datagram (`h` its headers, from `parsed`, the pipeline's one parse of it,
    /// which every caravan step below takes instead of classifying again).
    fn inbound_udp(&mut self, pkt: B, h: &Headers, parsed: &Parsed, now: u64, out: &mut Vec<B>) {
        let Some(ccfg) = self.cfg.caravan else {
            return out.push(pkt);
        };
        let excluded =
            self.cfg.exclude.contains(&h.key.sport) || self.cfg.exclude.contains(&h.key.dport);
        if excluded {
            return out.push(pkt);
        }
        if let Some(why) = self.unpackable(pkt.head(), h) {
            let c = &mut self.report.caravan;
            match why {
                Unpackable::Family => c.unpacked_family += 1,
                Unpackable::Vlan => c.unpacked_vlan += 1,
                Unpackable::LowTtl => c.unpacked_low_ttl += 1,
            }
            // What the flow has held leaves first, so the flow keeps its order.
            self.close_caravan(&h.key, out);
            return out.push(pkt);
        }
        let pkt = match self.caravans.get_mut(&h.key) {
            Some((Open::Caravan(builder), _)) => match builder.push_parsed(pkt, parsed) {
                Ok(()) => {
                    self.report.caravan.datagrams_packed += 1;
                    return;
                }
                // A datagram that does not fit, or differs where a caravan keeps one IP header
                // (TTL, ECN, DF), starts the flow's next caravan; one that cannot travel in any
                // passes. Either way after the held caravan, so the flow keeps its order.
                Err((CaravanError::Full | CaravanError::Mismatch, pkt)) => {
                    self.close_caravan(&h.key, out);
                    pkt
                }
                Err((_, pkt)) => {
                    self.close_caravan(&h.key, out);
                    return out.push(pkt);
                }
            },
            Some((Open::Lone(first, first_parsed), _)) => {
                match caravan::can_pair_parsed(first, first_parsed, &pkt, parsed, &ccfg) {
                    Ok(()) => return self.pair(pkt, h, parsed, &ccfg, out),
                    // Nothing joins the held datagram: it leaves as it came, first.
                    Err(_) => {
                        self.close_caravan(&h.key, out);
                        pkt
                    }
                }
            }
            None => pkt,
        };
        if self.caravans.len() >= MAX_OPEN_CARAVANS {
            return out.push(pkt);
        }
        // Held as it came until a second datagram joins it; one that could never open a caravan
        // passes at once.
        match caravan::packable_parsed(&pkt, parsed, &ccfg) {
            Ok(()) => {
                self.caravans.insert(h.key, (Open::Lone(pkt, *parsed), now));
            }
            Err(_) => out.push(pkt),
        }
    }

    /// A second datagram for the flow's held one, which [`caravan::can_pair_parsed`] said it
    /// joins: the two open a caravan, which keeps the held one's start time. Both bring their
    /// parses along.
    fn pair(
        &mut self,
        second: B,
        h: &Headers,
        parsed: &Parsed,
        ccfg: &CaravanConfig,
        out: &mut Vec<B>,
    ) {
        let (first, first_parsed, since) = match self.caravans.remove(&h.key) {
            Some((Open::Lone(first, first_parsed), since)) => (first, first_parsed, since),
            // Callers pair only with a lone datagram. Should an open caravan be found instead,
            // it leaves whole, first, rather than being dropped, and the datagram follows it.
            Some(open) => {
                self.caravans.insert(h.key, open);
                self.close_caravan(&h.key, out);
                return out.push(second);
            }
            None => return out.push(second),
        };
        match CaravanBuilder::start_parsed(first, &first_parsed, *ccfg, &self.pool) {
            Ok(mut b) => match b.push_parsed(second, parsed) {
                Ok(()) => {
                    self.report.caravan.datagrams_packed += 2;
                    self.caravans.insert(h.key, (Open::Caravan(b), since));
                }
                // can_pair checked everything push does; should it still refuse, the caravan of
                // one leaves (a valid caravan) and the second passes behind it.
                Err((_, second)) => {
                    self.report.caravan.datagrams_packed += 1;
                    self.report.caravan.caravans_built += 1;
                    out.push(b.finish());
                    out.push(second);
                }
            },
            // No buffer for the caravan's header: both leave as they came, in order (nothing
            // is lost for want of a header buffer).
            Err((_, first)) => {
                self.report.caravan.unwrapped_single += 2;
                out.push(first);
                out.push(second);
            }
        }
    }

    /// Why an inbound datagram must not travel in a caravan, if it must not: its family is not
    /// configured; it is double-tagged or 802.1ad-tagged (the decapsulator handles one 802.1Q
    /// tag); or its TTL/hop limit is so small that it may expire inside, where the ICMP error
    /// must quote the datagram as sent, not a caravan (`docs/caravan.md`).
    fn unpackable(&self, frame: &[u8], h: &Headers) -> Option<Unpackable> {
        let (v4, v6) = self.cfg.caravan_families;
        if !(if h.key.v6 { v6 } else { v4 }) {
            return Some(Unpackable::Family);
        }
        let eth = wire::EthernetFrame::new_unchecked(frame);
        let tags_ok = match eth.vlan_count() {
            0 => true,
            1 => eth.vlan_tpid(0) == Some(wire::ethernet::ethertype::VLAN),
            _ => false,
        };
        if !tags_ok {
            return Some(Unpackable::Vlan);
        }
        let l3 = &frame[h.l3_offset()..];
        let ttl = if h.key.v6 {
            wire::Ipv6Packet::new_unchecked(l3).hop_limit()
        } else {
            wire::Ipv4Packet::new_unchecked(l3).ttl()
        };
        (ttl <= self.cfg.pass_ttl).then_some(Unpackable::LowTtl)
    }

    fn close_caravan(&mut self, key: &FlowKey, out: &mut Vec<B>) {
        match self.caravans.remove(key) {
            Some((Open::Caravan(b), _)) => {
                self.report.caravan.caravans_built += 1;
                out.push(b.finish());
            }
            // Nothing joined it: it goes as it came.
            Some((Open::Lone(pkt, _), _)) => {
                self.report.caravan.unwrapped_single += 1;
                out.push(pkt);
            }
            None => {}
        }
    }

    /// After an inbound RX burst: settles the merge engine, releases expired windows and
    /// caravans.
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

    /// Closes the caravans opened at or before `opened_by` (all of them with `None`), oldest
    /// first.
    fn close_caravans_opened_by(&mut self, opened_by: Option<u64>, out: &mut Vec<B>) {
        self.expired.clear();
        self.expired.extend(
            self.caravans
                .iter()
                .filter(|(_, (_, t))| opened_by.is_none_or(|by| *t <= by))
                .map(|(k, _)| *k),
        );
        self.oldest_first();
        for i in 0..self.expired.len() {
            let key = self.expired[i];
            self.close_caravan(&key, out);
        }
    }

    /// Orders the caravans in `expired` oldest first (ties by flow key), so they leave in the
    /// order they were opened and a replay of the same capture gives the same output, not the
    /// order of a randomly seeded hash map.
    fn oldest_first(&mut self) {
        let caravans = &self.caravans;
        self.expired.sort_unstable_by_key(|k| {
            let opened = caravans.get(k).map_or(0, |(_, t)| *t);
            (opened, k.v6, k.src, k.dst, k.sport, k.dport, k.proto)
        });
    }

    /// Forgets connections idle for `idle_ns`.
    pub fn expire_connections(&mut self, now: u64, idle_ns: u64) -> usize {
        self.conns.expire(now.saturating_sub(idle_ns))
    }

    // ---- outbound ----

    /// Handles one frame from inside; what goes outside is appended to `out`.
    pub fn outbound(&mut self, mut pkt: B, now: u64, out: &mut Vec<B>) {
        self.report.outbound.packets_in += 1;
        self.report.outbound.bytes_in += pkt.len() as u64;
        self.report.sizes.outbound_received.record(pkt.len());
        // Parsed once here; the caravan unpacker takes the same parse.
        let parsed = Parsed::of(pkt.head(), pkt.len());
        match *parsed.class() {
            Class::Tcp(h) => {
                let key = conn::reverse(&h.key);
                let seg = conn::Segment::parse(pkt.head(), &h);
                if let Some(seg) = seg.filter(|s| !s.syn) {
                    // The inside host's segments may complete a half-open connection.
                    if !self.conns.on_inside(&key, &seg, now) {
                        self.conns.on_segment(&key, &seg, false, now);
                    }
                }
                if let Some(seg) = seg.filter(|s| s.syn) {
                    self.pmtu
                        .on_outbound_syn(pkt.head(), &h, now, &mut self.replies);
                    self.report.mss.handshakes += 1;
                    // The handshake first: a SYN-ACK that starts a new incarnation takes the
                    // hint of the SYN it answers, not the old connection's.
                    self.conns.on_handshake(key, &seg, false, None, now);
                    let pmtu = self.conns.pmtu_hint(&key, now).unwrap_or(self.cfg.emtu);
                    let target = self
                        .cfg
                        .mss_rewrite
                        .then(|| pmtu.saturating_sub(mss::overhead(h.key.v6)));
                    if let Some(frame) = pkt.head_mut() {
                        let hs = mss::rewrite(frame, &h, target, false);
                        self.report.mss.rewritten += u64::from(hs.rewritten.is_some());
                        self.report.mss.without_mss += u64::from(hs.mss.is_none());
                    }
                }
                // A half-open connection's hint counts too (data may follow a SYN-ACK at once,
                // as with TCP Fast Open); it only ever concerns that connection's packets.
                let hint = match self.conns.pmtu_hint(&key, now) {
                    Some(pmtu) => pmtu,
                    None => self.fallback_pmtu_for(match self.cfg.policy {
                        PmtuPolicy::Mss => self.cfg.fallback,
                        p => p,
                    }),
                };
                // A path MTU F-PMTUD discovered caps the hint (the cache answers the eMTU for
                // every other destination, without touching its table).
                let dst = if h.key.v6 {
                    std::net::IpAddr::from(h.key.dst)
                } else {
                    std::net::IpAddr::from([h.key.dst[0], h.key.dst[1], h.key.dst[2], h.key.dst[3]])
                };
                let mut pmtu = hint
                    .min(self.pmtu.pmtu(dst, now))
                    .max(self.split_floor(h.key.v6));
                if h.key.v6 && h.ip_len > pmtu && pmtu > self.cfg.blackhole_mtu {
                    pmtu = self.watch_blackhole(pkt.head(), &h, key, dst, pmtu, now);
                }
                // A segment that fits leaves as it is. One that does not is split from the parse
                // it came with: the MSS rewrite above keeps every length and offset, so `parsed`
                // still describes it.
                if h.ip_len <= pmtu {
                    return out.push(pkt);
                }
                match split_tcp_parsed(pkt, &parsed, pmtu, self.cfg.offloads, &self.pool, out) {
                    Ok(n) if n > 1 => {
                        self.report.split.packets += 1;
                        self.report.split.segments += n as u64;
                    }
                    Ok(_) => {}
                    Err((_, pkt)) => {
                        self.report.drops.split_failed += 1;
                        drop(pkt);
                    }
                }
            }
            Class::Udp(h) => {
                if let Some(ccfg) = self.cfg.caravan {
                    if dscp(pkt.head(), &h) == ccfg.dscp {
                        return self.outbound_caravan(pkt, &parsed, &ccfg, now, out);
                    }
                }
                // The parse already says how long the IP packet is: a datagram that fits the
                // eMTU leaves without `outbound_fit` reading its IP header again.
                if usize::from(h.ip_len) <= usize::from(self.cfg.emtu) {
                    return out.push(pkt);
                }
                self.outbound_fit(pkt, now, out);
            }
            Class::Malformed(_) | Class::Fragment | Class::OtherIp | Class::NonIp => {
                self.outbound_fit(pkt, now, out)
            }
        }
    }

    /// An IPv6 segment of a known connection that is about to be split to `pmtu`: the inside
    /// host sending the same segment again and again means the split segments vanish on the
    /// path and no Packet Too Big comes back (an ICMPv6 black hole, RFC 4821 §7.7/RFC 8899
    /// §4.3). The destination then falls back to `pmtu.blackhole_mtu`, logged once.
    fn watch_blackhole(
        &mut self,
        frame: &[u8],
        h: &Headers,
        key: wire::FlowKey,
        dst: IpAddr,
        pmtu: u16,
        now: u64,
    ) -> u16 {
        let Ok(tcp) = wire::TcpPacket::new_checked(&frame[h.l4_offset()..h.hdr_len()]) else {
            return pmtu;
        };
        let (limit, window) = (self.cfg.blackhole_retransmits, self.cfg.blackhole_window_ns);
        if limit == 0 {
            return pmtu;
        }
        // Also for a connection this instance splits without knowing it (behind ECMP it may
        // see only the inside host's segments).
        let Some(retx) = self.conns.retransmits_mut(&key, now) else {
            return pmtu;
        };
        if !retx.on_split(
            tcp.seq_number(),
            u32::from(h.payload_len),
            now,
            limit,
            window,
        ) {
            return pmtu;
        }
        let fallback = self.cfg.blackhole_mtu;
        if self.pmtu.cap(dst, fallback, now) {
            self.report.router.blackhole_fallbacks += 1;
            tracing::warn!(
                %dst,
                from = pmtu,
                to = fallback,
                "IPv6 black hole: split segments retransmitted without a Packet Too Big; splitting to the fallback size"
            );
        }
        fallback
    }

    /// An outbound datagram that wears the caravan mark (`parsed`, the pipeline's parse of it):
    /// unpacked when it is a caravan, else passed as an ordinary datagram.
    fn outbound_caravan(
        &mut self,
        pkt: B,
        parsed: &Parsed,
        ccfg: &CaravanConfig,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let start = out.len();
        match caravan::unpack_parsed(pkt, parsed, ccfg, &self.pool, out) {
            Ok(n) => {
                self.report.caravan.caravans_unpacked += 1;
                self.report.caravan.datagrams_unpacked += n as u64;
                // Datagrams too large for the outside are handled one by one as a router would
                // (fragments, or an ICMP error); what they become goes to the end of `out`,
                // already fitting.
                let mut i = start;
                while i < out.len() {
                    if out[i].len() > self.max_frame() {
                        let pkt = out.remove(i);
                        self.outbound_fit(pkt, now, out);
                    } else {
                        i += 1;
                    }
                }
            }
            // Marked, but no caravan header: an ordinary datagram that wears the DSCP, passed
            // as it came.
            Err((CaravanError::NotCaravan, pkt)) => {
                self.report.caravan.marked_plain += 1;
                self.outbound_fit(pkt, now, out);
            }
            // A caravan header the gateway does not understand: not its to rewrite.
            Err((CaravanError::UnknownVersion(_), pkt)) => {
                self.report.caravan.unknown_version += 1;
                self.outbound_fit(pkt, now, out);
            }
            Err((CaravanError::PoolExhausted, pkt)) => {
                self.report.drops.pool_exhausted += 1;
                drop(pkt);
            }
            Err((_, pkt)) => {
                self.report.drops.caravan_malformed += 1;
                drop(pkt);
            }
        }
    }

    fn max_frame(&self) -> usize {
        usize::from(self.cfg.emtu) + VLAN_ETH_HLEN
    }

    /// A packet the gateway does not split: forwarded when it fits the external link, else
    /// handled as a router would: fragmented, or dropped, counted and answered with ICMP.
    fn outbound_fit(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        let emtu = usize::from(self.cfg.emtu);
        match ip_layout(pkt.head()) {
            Some(ip) if ip.len > emtu => self.outbound_oversize(pkt, ip, now, out),
            Some(_) => out.push(pkt),
            None if pkt.len() > self.max_frame() => {
                self.report.drops.oversize += 1;
                drop(pkt);
            }
            None => out.push(pkt),
        }
    }

    /// An IP packet larger than the eMTU: fragmented (IPv4, DF clear), or dropped and answered
    /// with "fragmentation needed" (IPv4, DF set) or Packet Too Big (IPv6).
    fn outbound_oversize(&mut self, pkt: B, ip: IpLayout, now: u64, out: &mut Vec<B>) {
        if !ip.v6 && !ip.dont_frag {
            match fragment_ipv4(&pkt, ip.l2_len, self.cfg.emtu, &self.pool, out) {
                Ok(n) => {
                    self.report.router.fragmented += 1;
                    self.report.router.fragments_out += n as u64;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "oversize IPv4 packet not fragmented");
                    self.report.router.fragment_failed += 1;
                    self.report.drops.oversize += 1;
                }
            }
            return;
        }
        self.report.drops.oversize += 1;
        if !self.cfg.icmp.enabled {
            self.report.router.icmp_suppressed += 1;
            return;
        }
        let mtu = self.cfg.emtu.min(self.pmtu.pmtu(ip.dst, now));
        match icmp_err::too_big(&pkt, mtu, &self.cfg.icmp) {
            Ok(frame) if self.limiter.allow(ip.src, now) => {
                if ip.v6 {
                    self.report.router.ptb_sent += 1;
                } else {
                    self.report.router.frag_needed_sent += 1;
                }
                self.inside_replies.push(frame);
            }
            Ok(_) => self.report.router.icmp_rate_limited += 1,
            Err(_) => self.report.router.icmp_suppressed += 1,
        }
    }
}

/// Where an IP packet lies in its frame, and what the oversize path needs of its header.
#[derive(Clone, Copy, Debug)]
struct IpLayout {
    l2_len: usize,
    v6: bool,
    /// IPv4 total length, or 40 plus the IPv6 payload length.
    len: usize,
    dont_frag: bool,
    src: IpAddr,
    dst: IpAddr,
}

/// The IP layout of a frame whose IP header lies in `head`; `None` for anything else.
fn ip_layout(head: &[u8]) -> Option<IpLayout> {
    let eth = wire::EthernetFrame::new_checked(head).ok()?;
    let l2_len = eth.header_len();
    let l3 = head.get(l2_len..)?;
    match eth.ethertype() {
        wire::ethernet::ethertype::IPV4 => {
            let ip = wire::Ipv4Packet::new_checked(l3).ok()?;
            Some(IpLayout {
                l2_len,
                v6: false,
                len: usize::from(ip.total_len()),
                dont_frag: ip.dont_frag(),
                src: IpAddr::from(ip.src_addr()),
                dst: IpAddr::from(ip.dst_addr()),
            })
        }
        wire::ethernet::ethertype::IPV6 => {
            let ip = wire::Ipv6Packet::new_checked(l3).ok()?;
            Some(IpLayout {
                l2_len,
                v6: true,
                len: wire::ipv6::field::HEADER_LEN + usize::from(ip.payload_len()),
                dont_frag: true,
                src: IpAddr::from(ip.src_addr()),
                dst: IpAddr::from(ip.dst_addr()),
            })
        }
        _ => None,
    }
}

/// Why inbound UDP passes unpacked ([`Pipeline::unpackable`]).
#[derive(Clone, Copy, Debug)]
enum Unpackable {
    /// Its family is not in `[caravan] families`.
    Family,
    /// Double-tagged, or behind an 802.1ad tag.
    Vlan,
    /// TTL or hop limit at most `[caravan] pass_ttl`.
    LowTtl,
}

/// An ICMP error from outside and the packet it quotes (which an inside host, or the gateway
/// on its behalf, sent).
#[derive(Clone, Copy, Debug)]
struct QuotedError {
    v6: bool,
    /// The MTU of a Packet Too Big or "fragmentation needed", when it is one.
    too_big: Option<u16>,
    proto: u8,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    /// The quoted TCP segment's sequence number (the 8 bytes RFC 792 guarantees hold it).
    tcp_seq: Option<u32>,
}

impl QuotedError {
    /// The quoted packet's flow, as its sender wrote it.
    fn flow(&self) -> wire::FlowKey {
        let addr = |a: IpAddr| match a {
            IpAddr::V4(v) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&v.octets());
                b
            }
            IpAddr::V6(v) => v.octets(),
        };
        wire::FlowKey {
            src: addr(self.src),
            dst: addr(self.dst),
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            v6: self.v6,
        }
    }
}

/// Reads an ICMPv4/ICMPv6 error frame and the header of the packet it quotes (IP header plus
/// the first 8 bytes, which hold the ports, as RFC 792 guarantees). `None` for anything else.
fn quoted_error(head: &[u8]) -> Option<QuotedError> {
    use wire::icmp::{v4, v6};
    let eth = wire::EthernetFrame::new_checked(head).ok()?;
    let l3 = head.get(eth.header_len()..)?;
    let (v6, icmp) = match eth.ethertype() {
        wire::ethernet::ethertype::IPV4 => {
            let ip = wire::Ipv4Packet::new_checked(l3).ok()?;
            if ip.protocol() != wire::ip_proto::ICMP || ip.is_fragment() {
                return None;
            }
            let icmp = wire::IcmpPacket::new_checked(l3.get(ip.header_len()..)?).ok()?;
            if !v4::is_error(icmp.msg_type()) {
                return None;
            }
            (false, icmp)
        }
        wire::ethernet::ethertype::IPV6 => {
            let ip = wire::Ipv6Packet::new_checked(l3).ok()?;
            if ip.next_header() != wire::ip_proto::ICMPV6 {
                return None;
            }
            let icmp =
                wire::IcmpPacket::new_checked(l3.get(wire::ipv6::field::HEADER_LEN..)?).ok()?;
            if !v6::is_error(icmp.msg_type()) {
                return None;
            }
            (true, icmp)
        }
        _ => return None,
    };
    let quoted_ip = icmp.quoted();
    let (proto, src, dst, l4) = if v6 {
        let ip = wire::Ipv6Packet::new_checked(quoted_ip).ok()?;
        (
            ip.next_header(),
            IpAddr::from(ip.src_addr()),
            IpAddr::from(ip.dst_addr()),
            wire::ipv6::field::HEADER_LEN,
        )
    } else {
        let ip = wire::Ipv4Packet::new_checked(quoted_ip).ok()?;
        if ip.frag_offset() != 0 {
            return None;
        }
        (
            ip.protocol(),
            IpAddr::from(ip.src_addr()),
            IpAddr::from(ip.dst_addr()),
            ip.header_len(),
        )
    };
    let ports = quoted_ip.get(l4..l4 + 4)?;
    let tcp_seq = quoted_ip
        .get(l4 + 4..l4 + 8)
        .filter(|_| proto == wire::ip_proto::TCP)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let too_big = match (v6, icmp.msg_type(), icmp.code()) {
        (false, v4::DEST_UNREACHABLE, v4::CODE_FRAG_NEEDED) => Some(icmp.next_hop_mtu()),
        (true, v6::PACKET_TOO_BIG, _) => Some(u16::try_from(icmp.mtu_v6()).unwrap_or(u16::MAX)),
        _ => None,
    }
    .filter(|&m| m > 0);
    Some(QuotedError {
        v6,
        too_big,
        proto,
        src,
        dst,
        sport: u16::from_be_bytes([ports[0], ports[1]]),
        dport: u16::from_be_bytes([ports[2], ports[3]]),
        tcp_seq,
    })
}

fn dscp(frame: &[u8], h: &Headers) -> u8 {
    let l3 = &frame[h.l3_offset()..];
    if h.key.v6 {
        wire::Ipv6Packet::new_unchecked(l3).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(l3).dscp()
    }
}

/// The bytes of an IP header's start that clearing its DSCP rewrites (for IPv4, up to its
/// checksum).
fn dscp_span(v6: bool) -> usize {
    if v6 {
        // The version, traffic class and flow label word.
        4
    } else {
        wire::ipv4::field::CHECKSUM.end
    }
}

/// The DSCP of the IP header at `l3` of `frame`, when the frame holds the bytes that carry it.
fn dscp_at(frame: &[u8], l3: usize, v6: bool) -> Option<u8> {
    let ip = frame.get(l3..l3 + if v6 { dscp_span(v6) } else { 2 })?;
    Some(if v6 {
        wire::Ipv6Packet::new_unchecked(ip).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(ip).dscp()
    })
}

/// Sets the DSCP of the IP header at `l3` to 0. The IPv4 header checksum is updated for the one
/// word that changed (RFC 1624), never computed afresh: a header that arrived damaged stays
/// damaged, for the receiver to drop.
fn clear_dscp(frame: &mut [u8], l3: usize, v6: bool) {
    let ip = &mut frame[l3..l3 + dscp_span(v6)];
    if v6 {
        wire::Ipv6Packet::new_unchecked(ip).set_dscp(0);
        return;
    }
    // Version, IHL and TOS: the header's first 16-bit word, before and after.
    let old = u16::from_be_bytes([ip[0], ip[1]]);
    wire::Ipv4Packet::new_unchecked(&mut *ip).set_dscp(0);
    let new = u16::from_be_bytes([ip[0], ip[1]]);
    let mut ip = wire::Ipv4Packet::new_unchecked(ip);
    ip.set_checksum(pxio::checksum::update(ip.checksum(), old, new));
}
