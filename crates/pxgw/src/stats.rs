//! What the gateway did, per direction, for the periodic summary line, the final summary and
//! `--stats-json`; and what its ports did ([`PortCounters`]), so no frame is lost out of sight
//! (a full RX ring shows as `imissed`, a refused transmission as `tx_dropped`).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Packet and byte counts of one direction.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Direction {
    /// Frames received on the port this direction starts at.
    pub packets_in: u64,
    /// Their bytes (Ethernet frames).
    pub bytes_in: u64,
    /// Frames the driver of the port this direction ends at took (`rte_eth_tx_burst`'s count);
    /// frames it kept refusing are in [`Drops::tx_dropped`], never here.
    pub packets_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// Largest frame sent, bytes.
    pub max_frame_out: u64,
}

impl Direction {
    fn add(&mut self, o: &Direction) {
        self.packets_in += o.packets_in;
        self.bytes_in += o.bytes_in;
        self.packets_out += o.packets_out;
        self.bytes_out += o.bytes_out;
        self.max_frame_out = self.max_frame_out.max(o.max_frame_out);
    }
}

/// Drops, by reason. Every packet the gateway received is either sent or counted here.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Drops {
    /// Frames the TX queue kept refusing (the driver never took them), then freed.
    pub tx_dropped: u64,
    /// Larger than the external MTU and not splittable (non-TCP).
    pub oversize: u64,
    /// A TCP packet that could not be split (no buffer, bad checksum, MTU too small).
    pub split_failed: u64,
    /// A caravan from inside that was malformed.
    pub caravan_malformed: u64,
    /// No buffer to build a caravan or a header.
    pub pool_exhausted: u64,
    /// Inbound packets larger than the internal MTU that could not be fragmented (DF set, IPv6,
    /// not IP): dropped, and answered with ICMP as a router would ([`InboundOversize`]).
    pub oversize_inbound: u64,
    /// Merged packets the merge engine dropped because no buffer was left to rewrite their
    /// shared headers.
    pub merge_no_buffer: u64,
    /// Inbound frames that wore the caravan mark (or may have) and could not be rewritten
    /// without it (shared data, or a first buffer too short for the IP header's first bytes).
    pub mark_uncleared: u64,
}

impl Drops {
    fn add(&mut self, o: &Drops) {
        self.tx_dropped += o.tx_dropped;
        self.oversize += o.oversize;
        self.split_failed += o.split_failed;
        self.caravan_malformed += o.caravan_malformed;
        self.pool_exhausted += o.pool_exhausted;
        self.oversize_inbound += o.oversize_inbound;
        self.merge_no_buffer += o.merge_no_buffer;
        self.mark_uncleared += o.mark_uncleared;
    }

    /// Each reason, named as in the JSON, with its count: the one list the total, the
    /// summary line and Prometheus read.
    pub fn by_reason(&self) -> [(&'static str, u64); 8] {
        [
            ("tx_dropped", self.tx_dropped),
            ("oversize", self.oversize),
            ("split_failed", self.split_failed),
            ("caravan_malformed", self.caravan_malformed),
            ("pool_exhausted", self.pool_exhausted),
            ("oversize_inbound", self.oversize_inbound),
            ("merge_no_buffer", self.merge_no_buffer),
            ("mark_uncleared", self.mark_uncleared),
        ]
    }

    /// All drops.
    pub fn total(&self) -> u64 {
        self.by_reason().iter().map(|(_, v)| v).sum()
    }
}

/// Inbound packets larger than the internal MTU, handled as a router in front of the b-network
/// would: IPv4 without DF fragmented to the iMTU, the rest dropped (counted in
/// [`Drops::oversize_inbound`]) and answered toward the outside sender.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct InboundOversize {
    /// IPv4 packets with DF clear, fragmented to the iMTU.
    pub fragmented: u64,
    /// Fragments those became.
    pub fragments_out: u64,
    /// ICMPv4 "fragmentation needed" (next-hop MTU = the iMTU) sent to outside senders.
    pub frag_needed_sent: u64,
    /// ICMPv6 Packet Too Big (MTU = the iMTU) sent to outside senders.
    pub ptb_sent: u64,
    /// Errors held back by the rate limits (the packet was still dropped).
    pub icmp_rate_limited: u64,
    /// Errors the rules forbid (an ICMP error, a non-initial fragment, multicast or broadcast,
    /// not IP) or that are turned off.
    pub icmp_suppressed: u64,
}

impl InboundOversize {
    fn add(&mut self, o: &InboundOversize) {
        self.fragmented += o.fragmented;
        self.fragments_out += o.fragments_out;
        self.frag_needed_sent += o.frag_needed_sent;
        self.ptb_sent += o.ptb_sent;
        self.icmp_rate_limited += o.icmp_rate_limited;
        self.icmp_suppressed += o.icmp_suppressed;
    }
}

/// Merge engine outcome (inbound TCP).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct MergeSummary {
    /// TCP payload bytes that went into merge items.
    pub payload_in: u64,
    /// Of those, bytes that left in iMTU-bound packets.
    pub payload_full: u64,
    /// `payload_full / payload_in`.
    pub conversion_yield: f64,
    /// Mean added delay per segment, µs.
    pub mean_delay_us: f64,
    /// 99th percentile of the added delay, µs.
    pub p99_delay_us: f64,
    /// Segments merged into others.
    pub merges: u64,
    /// Segments cut at the iMTU.
    pub cuts: u64,
    /// Items held right now.
    pub held_items: u64,
    /// TCP segments whose checksum did not verify (the NIC's verdict, or software). They are
    /// passed through unmerged, for the receiver to drop, so this is not a drop.
    pub bad_checksum: u64,
    /// IPv4 segments whose header checksum did not verify: passed through unmerged, likewise.
    pub bad_ip_checksum: u64,
    /// Flows in the merge engine's flow table right now (its occupancy).
    pub flows: u64,
    /// Flows evicted from a full bucket of the flow table (their items were flushed).
    pub evictions: u64,
}

/// UDP caravans.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct CaravanSummary {
    /// Datagrams packed into caravans (inbound).
    pub datagrams_packed: u64,
    /// Caravans sent inside.
    pub caravans_built: u64,
    /// Caravans unpacked (outbound).
    pub caravans_unpacked: u64,
    /// Datagrams they carried.
    pub datagrams_unpacked: u64,
    /// Inbound UDP passed unpacked: its family is not in `[caravan] families`.
    pub unpacked_family: u64,
    /// Inbound UDP passed unpacked: double-tagged, or behind an 802.1ad tag.
    pub unpacked_vlan: u64,
    /// Inbound UDP passed unpacked: TTL or hop limit at most `[caravan] pass_ttl`.
    pub unpacked_low_ttl: u64,
    /// Outbound UDP wearing the caravan mark without a caravan header: ordinary datagrams,
    /// passed untouched (`docs/caravan.md`).
    pub marked_plain: u64,
    /// Outbound caravans of a version the gateway does not understand, passed untouched.
    pub unknown_version: u64,
    /// Inbound datagrams that nothing joined before their caravan would have left: sent inside
    /// as they came, since a caravan of one only adds 16 bytes (`docs/caravan.md`).
    pub unwrapped_single: u64,
    /// Inbound packets that wore the caravan mark and had it cleared: the mark is the gateway's
    /// to give, so an outsider's pre-formed caravan reaches the inside as one ordinary datagram.
    pub mark_cleared: u64,
}

/// Outbound TCP packets split to the path MTU in software (one packet in, `segments` out; a
/// split the NIC does with TSO leaves pxgw as one packet and is not counted here).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SplitSummary {
    /// Packets split.
    pub packets: u64,
    /// Segments they became.
    pub segments: u64,
}

/// Frames the gateway itself originates or consumes, which no port delivered for forwarding or
/// no forwarded frame became (F-PMTUD probes and answers; reports to its own probes).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct GatewayFrames {
    /// Frames the gateway built and handed to the outside port's queue (probes, answers).
    pub sent: u64,
    /// Frames from outside addressed to the gateway itself, consumed (reports to its probes).
    pub received: u64,
}

/// Handshakes.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct MssSummary {
    /// SYN and SYN-ACK segments seen.
    pub handshakes: u64,
    /// Of those, MSS options rewritten.
    pub rewritten: u64,
    /// Of those, without an MSS option.
    pub without_mss: u64,
    /// Established connections evicted, least recently seen first, to make room for newer
    /// ones (the table never refuses one).
    pub established_evicted: u64,
    /// Outside SYN and SYN-ACK segments whose MSS was below the floor (`[mss] min`): not
    /// raised, so the inside host segments for itself.
    pub below_floor: u64,
    /// SYN and SYN-ACK segments on an established connection that changed nothing (RFC 5961
    /// §4): a spoofed or stale one, or a new incarnation the inside host did not accept.
    pub syn_ignored: u64,
    /// Half-open connections held now (a SYN seen, the handshake not completed).
    pub half_open: u64,
    /// Half-open connections evicted to make room for newer ones (a SYN flood shows here).
    pub half_open_evicted: u64,
    /// Connections learned from their data, their handshake unseen (after a restart).
    pub learned: u64,
    /// Connections learned from one direction only (`[connections] one_way`: behind ECMP).
    pub learned_one_way: u64,
}

/// Upper bounds (inclusive) of the frame-size buckets, bytes of the Ethernet frame without FCS:
/// the classic sizes (64, 1518 = MTU 1500 with a VLAN tag, 4018 = MTU 4000, 9018 = MTU 9000)
/// fall on a bound, so a histogram shows on which side of each MTU the frames are. Frames above
/// the last bound land in a final, unbounded bucket.
pub const FRAME_SIZE_BOUNDS: [u64; 12] = [
    64, 128, 256, 512, 1024, 1518, 2048, 4018, 8192, 9018, 16384, 65535,
];

/// A distribution of frame sizes over [`FRAME_SIZE_BOUNDS`]: recording is a search over 12
/// bounds and two additions, and it never allocates, so workers record every frame.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct SizeHistogram {
    /// Frames per bucket (not cumulative): `counts[i]` holds frames of at most
    /// `FRAME_SIZE_BOUNDS[i]` bytes and more than the bound before; the last, frames above
    /// every bound.
    pub counts: [u64; FRAME_SIZE_BOUNDS.len() + 1],
    /// Bytes of all frames recorded.
    pub sum: u64,
}

impl SizeHistogram {
    /// Records one frame of `len` bytes.
    #[inline]
    pub fn record(&mut self, len: usize) {
        let len = len as u64;
        let i = FRAME_SIZE_BOUNDS.partition_point(|&b| b < len);
        self.counts[i] += 1;
        self.sum += len;
    }

    /// Frames recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another histogram's frames.
    pub fn add(&mut self, o: &SizeHistogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts) {
            *a += b;
        }
        self.sum += o.sum;
    }
}

/// Frame sizes where they cross the gateway: received and sent, per direction. The inbound pair
/// is the picture of the translation (small frames outside, iMTU-sized inside).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct FrameSizes {
    /// Frames received from outside (the outside wire).
    pub inbound_received: SizeHistogram,
    /// Frames sent inside (the inside wire).
    pub inbound_sent: SizeHistogram,
    /// Frames received from inside.
    pub outbound_received: SizeHistogram,
    /// Frames sent outside.
    pub outbound_sent: SizeHistogram,
}

impl FrameSizes {
    fn add(&mut self, o: &FrameSizes) {
        self.inbound_received.add(&o.inbound_received);
        self.inbound_sent.add(&o.inbound_sent);
        self.outbound_received.add(&o.outbound_received);
        self.outbound_sent.add(&o.outbound_sent);
    }
}

/// One worker's counters (and, summed, the gateway's).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Outside → inside.
    pub inbound: Direction,
    /// Inside → outside.
    pub outbound: Direction,
    /// Merging.
    pub merge: MergeSummary,
    /// Added delay, ns (for aggregation).
    pub delay_ns: Option<Histogram<u64>>,
    /// Caravans.
    pub caravan: CaravanSummary,
    /// Handshakes.
    pub mss: MssSummary,
    /// Software splits.
    pub split: SplitSummary,
    /// The gateway's own frames.
    pub gateway_frames: GatewayFrames,
    /// Drops.
    pub drops: Drops,
    /// Connections known.
    pub connections: u64,
    /// F-PMTUD.
    pub pmtud: crate::pmtud::PmtudSummary,
    /// Path MTUs F-PMTUD discovered (the most recent, per worker).
    pub pmtud_paths: Vec<crate::pmtud::DiscoveredPath>,
    /// Router behaviour: ICMP errors, fragments, path MTUs learned.
    pub router: crate::icmp::RouterSummary,
    /// Inbound packets above the internal MTU.
    pub inbound_oversize: InboundOversize,
    /// Frame sizes received and sent.
    pub sizes: FrameSizes,
}

impl Report {
    /// Adds another worker's report.
    pub fn add(&mut self, o: &Report) {
        self.inbound.add(&o.inbound);
        self.outbound.add(&o.outbound);
        self.merge.payload_in += o.merge.payload_in;
        self.merge.payload_full += o.merge.payload_full;
        self.merge.merges += o.merge.merges;
        self.merge.cuts += o.merge.cuts;
        self.merge.held_items += o.merge.held_items;
        self.merge.bad_checksum += o.merge.bad_checksum;
        self.merge.bad_ip_checksum += o.merge.bad_ip_checksum;
        self.merge.flows += o.merge.flows;
        self.merge.evictions += o.merge.evictions;
        self.sizes.add(&o.sizes);
        match (&mut self.delay_ns, &o.delay_ns) {
            (Some(a), Some(b)) => {
                let _ = a.add(b);
            }
            (None, Some(b)) => self.delay_ns = Some(b.clone()),
            _ => {}
        }
        self.caravan.datagrams_packed += o.caravan.datagrams_packed;
        self.caravan.caravans_built += o.caravan.caravans_built;
        self.caravan.caravans_unpacked += o.caravan.caravans_unpacked;
        self.caravan.datagrams_unpacked += o.caravan.datagrams_unpacked;
        self.caravan.unpacked_family += o.caravan.unpacked_family;
        self.caravan.unpacked_vlan += o.caravan.unpacked_vlan;
        self.caravan.unpacked_low_ttl += o.caravan.unpacked_low_ttl;
        self.caravan.marked_plain += o.caravan.marked_plain;
        self.caravan.unknown_version += o.caravan.unknown_version;
        self.caravan.unwrapped_single += o.caravan.unwrapped_single;
        self.caravan.mark_cleared += o.caravan.mark_cleared;
        self.mss.handshakes += o.mss.handshakes;
        self.mss.rewritten += o.mss.rewritten;
        self.mss.without_mss += o.mss.without_mss;
        self.mss.established_evicted += o.mss.established_evicted;
        self.mss.below_floor += o.mss.below_floor;
        self.mss.syn_ignored += o.mss.syn_ignored;
        self.split.packets += o.split.packets;
        self.split.segments += o.split.segments;
        self.gateway_frames.sent += o.gateway_frames.sent;
        self.gateway_frames.received += o.gateway_frames.received;
        self.mss.half_open += o.mss.half_open;
        self.mss.half_open_evicted += o.mss.half_open_evicted;
        self.mss.learned += o.mss.learned;
        self.mss.learned_one_way += o.mss.learned_one_way;
        self.drops.add(&o.drops);
        self.connections += o.connections;
        let (a, b) = (&mut self.pmtud, &o.pmtud);
        a.probed += b.probed;
        a.probes_sent += b.probes_sent;
        a.discovered += b.discovered;
        a.fallbacks += b.fallbacks;
        a.cached += b.cached;
        a.answered += b.answered;
        a.fragments_in += b.fragments_in;
        a.expired += b.expired;
        a.respond_source_limited += b.respond_source_limited;
        a.respond_global_limited += b.respond_global_limited;
        self.pmtud_paths.extend_from_slice(&o.pmtud_paths);
        self.router.add(&o.router);
        self.inbound_oversize.add(&o.inbound_oversize);
        self.finish();
    }

    /// Derives the ratios from the counts.
    pub fn finish(&mut self) {
        self.merge.conversion_yield = if self.merge.payload_in == 0 {
            0.0
        } else {
            self.merge.payload_full as f64 / self.merge.payload_in as f64
        };
        if let Some(h) = &self.delay_ns {
            if !h.is_empty() {
                self.merge.mean_delay_us = h.mean() / 1e3;
                self.merge.p99_delay_us = h.value_at_quantile(0.99) as f64 / 1e3;
            }
        }
    }

    /// The JSON document of `--stats-json`.
    pub fn to_json(
        &self,
        seconds: f64,
        leaked_mbufs: usize,
        ports: &PortCounters,
    ) -> serde_json::Value {
        serde_json::json!({
            "seconds": seconds,
            "inbound": self.inbound,
            "outbound": self.outbound,
            "merge": self.merge,
            "caravan": self.caravan,
            "mss": self.mss,
            "split": self.split,
            "gateway_frames": self.gateway_frames,
            "drops": self.drops,
            "connections": self.connections,
            "pmtud": self.pmtud_json(),
            "router": self.router,
            "inbound_oversize": self.inbound_oversize,
            "frame_sizes": self.frame_sizes_json(),
            "ports": ports,
            "leaked_mbufs": leaked_mbufs,
        })
    }

    /// `frame_sizes`' JSON: the bucket bounds, then each histogram.
    fn frame_sizes_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!(self.sizes);
        v["bounds"] = serde_json::json!(FRAME_SIZE_BOUNDS);
        v
    }

    /// `pmtud`'s JSON: the counters, and `paths`, the discovered path MTUs.
    fn pmtud_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!(self.pmtud);
        v["paths"] = serde_json::json!(self.pmtud_paths);
        v
    }

    /// The `workers` array of `--stats-json`: each worker's own packet counts, in worker order,
    /// so one can see that every worker carries traffic.
    pub fn workers_json(workers: &[Report]) -> serde_json::Value {
        workers
            .iter()
            .enumerate()
            .map(|(i, r)| {
                serde_json::json!({
                    "worker": i,
                    "packets_in": r.inbound.packets_in + r.outbound.packets_in,
                    "packets_out": r.inbound.packets_out + r.outbound.packets_out,
                    "inbound": r.inbound,
                    "outbound": r.outbound,
                    "connections": r.connections,
                    "pmtud": r.pmtud,
                })
            })
            .collect()
    }

    /// The header of the periodic table ([`row`](Self::row)): column names with their units.
    /// `ext→`/`→int` are frames received outside and sent inside (inbound), `int→`/`→ext` the
    /// other way; the last four are changes over the interval, both ports added up.
    pub fn header() -> String {
        format!(
            "| {:>7} | {:>9} {:>9} {:>7} {:>16} {:>5} | {:>9} {:>9} {:>6} | {:>6} {:>7} {:>7} {:>7} |",
            "t [s]",
            "ext→ kpps",
            "→int kpps",
            "yield %",
            "delay µs avg/p99",
            "held",
            "int→ kpps",
            "→ext kpps",
            "max B",
            "+drops",
            "+missed",
            "+nombuf",
            "+oerr",
        )
    }

    /// One row of the periodic table: the change from `prev` over `dt` seconds, at `t` seconds
    /// since the start; `ports` and `prev_ports` are the port counters now and then. Yield,
    /// delay and held items are the state now (since the start).
    pub fn row(
        &self,
        prev: &Report,
        dt: f64,
        t: f64,
        ports: &PortCounters,
        prev_ports: &PortCounters,
    ) -> String {
        let rate = |a: u64, b: u64| (a.saturating_sub(b)) as f64 / dt.max(1e-9) / 1e3;
        let port_delta = |get: fn(&PortSample) -> u64| {
            get(&ports.external.counters).saturating_sub(get(&prev_ports.external.counters))
                + get(&ports.internal.counters).saturating_sub(get(&prev_ports.internal.counters))
        };
        let delay = format!(
            "{:.0}/{:.0}",
            self.merge.mean_delay_us, self.merge.p99_delay_us
        );
        format!(
            "| {:>7.1} | {:>9.1} {:>9.1} {:>7.1} {:>16} {:>5} | {:>9.1} {:>9.1} {:>6} | {:>6} {:>7} {:>7} {:>7} |",
            t,
            rate(self.inbound.packets_in, prev.inbound.packets_in),
            rate(self.inbound.packets_out, prev.inbound.packets_out),
            100.0 * self.merge.conversion_yield,
            delay,
            self.merge.held_items,
            rate(self.outbound.packets_in, prev.outbound.packets_in),
            rate(self.outbound.packets_out, prev.outbound.packets_out),
            self.inbound.max_frame_out.max(self.outbound.max_frame_out),
            self.drops.total().saturating_sub(prev.drops.total()),
            port_delta(|c| c.imissed),
            port_delta(|c| c.rx_nombuf),
            port_delta(|c| c.oerrors),
        )
    }

    /// The final summary: totals, drops by reason, and both ports' counters.
    pub fn summary(&self, seconds: f64, ports: &PortCounters) -> String {
        format!(
            "after {seconds:.1} s: inbound {} pkts {} B -> {} pkts {} B; outbound {} pkts {} B -> {} pkts {} B; yield {:.1} %; delay {:.1}/{:.1} us mean/p99; caravans {}/{} datagrams; drops {}\n  ext {}\n  int {}",
            self.inbound.packets_in,
            self.inbound.bytes_in,
            self.inbound.packets_out,
            self.inbound.bytes_out,
            self.outbound.packets_in,
            self.outbound.bytes_in,
            self.outbound.packets_out,
            self.outbound.bytes_out,
            100.0 * self.merge.conversion_yield,
            self.merge.mean_delay_us,
            self.merge.p99_delay_us,
            self.caravan.caravans_built,
            self.caravan.datagrams_packed,
            drops_line(&self.drops),
            ports.external.line(&PortReport::default()),
            ports.internal.line(&PortReport::default()),
        )
    }
}

/// A port's counters as the driver reports them (`rte_eth_stats`), under DPDK's names; see
/// [`dpdk::PortStats`] for how they add up.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortSample {
    /// Frames received and delivered to pxgw.
    pub ipackets: u64,
    /// Frames the device dropped because its RX ring was full.
    pub imissed: u64,
    /// Erroneous frames received.
    pub ierrors: u64,
    /// Frames lost for lack of an mbuf to receive into.
    pub rx_nombuf: u64,
    /// Frames transmitted.
    pub opackets: u64,
    /// Frames the driver took but failed to transmit.
    pub oerrors: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
}

impl From<dpdk::PortStats> for PortSample {
    fn from(s: dpdk::PortStats) -> Self {
        Self {
            ipackets: s.ipackets,
            imissed: s.imissed,
            ierrors: s.ierrors,
            rx_nombuf: s.rx_nombuf,
            opackets: s.opackets,
            oerrors: s.oerrors,
            ibytes: s.ibytes,
            obytes: s.obytes,
        }
    }
}

/// The kernel's own counters of the interface behind a kernel-backed port (af_packet, af_xdp,
/// tap), from `/sys/class/net/IF/statistics` ([`crate::sysfs::kernel_counters`]). The kernel does not count here the frames a full
/// `net_af_packet` socket ring dropped; the port's `imissed` does (the `dpdk` crate reads them
/// from the sockets, which DPDK 22.11 does not), so `rx_packets` == `ipackets + imissed`.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct KernelSample {
    /// Frames the interface received.
    pub rx_packets: u64,
    /// Frames the interface dropped on receive.
    pub rx_dropped: u64,
    /// Frames the interface sent.
    pub tx_packets: u64,
    /// Frames the interface dropped on transmit.
    pub tx_dropped: u64,
}

/// One port: the driver's counters, and the kernel interface's when there is one.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortReport {
    /// The device string from the configuration.
    pub device: String,
    /// The driver's counters.
    #[serde(flatten)]
    pub counters: PortSample,
    /// The kernel interface's counters (kernel-backed ports only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelSample>,
}

impl PortReport {
    /// `ipackets +N imissed +N ierrors +N rx_nombuf +N opackets +N oerrors +N`: the change
    /// since `prev`, then the totals in brackets.
    pub fn line(&self, prev: &PortReport) -> String {
        let (c, p) = (&self.counters, &prev.counters);
        let mut parts = Vec::with_capacity(6);
        for (name, now, before) in [
            ("ipackets", c.ipackets, p.ipackets),
            ("imissed", c.imissed, p.imissed),
            ("ierrors", c.ierrors, p.ierrors),
            ("rx_nombuf", c.rx_nombuf, p.rx_nombuf),
            ("opackets", c.opackets, p.opackets),
            ("oerrors", c.oerrors, p.oerrors),
        ] {
            parts.push(format!("{name} +{} ({now})", now.saturating_sub(before)));
        }
        parts.join(" ")
    }
}

/// Both ports' counters at one moment.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct PortCounters {
    /// Toward the Internet.
    pub external: PortReport,
    /// Toward the large-MTU network.
    pub internal: PortReport,
}

fn drops_line(d: &Drops) -> String {
    if d.total() == 0 {
        return "0".into();
    }
    let parts: Vec<String> = d
        .by_reason()
        .into_iter()
        .filter(|&(_, v)| v > 0)
        .map(|(name, v)| format!("{name}={v}"))
        .collect();
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The periodic row lines up under its header: same width, column bars at the same places,
    /// and the rates are per second over the interval.
    #[test]
    fn table_row_aligns_with_header() {
        let bars = |s: &str| -> Vec<usize> {
            s.chars()
                .enumerate()
                .filter(|(_, c)| *c == '|')
                .map(|(i, _)| i)
                .collect()
        };
        let mut now = Report::default();
        now.inbound.packets_in = 2_000_000;
        now.inbound.packets_out = 400_000;
        now.inbound.max_frame_out = 9014;
        now.merge.conversion_yield = 0.959;
        now.merge.mean_delay_us = 16.2;
        now.merge.p99_delay_us = 264.0;
        now.drops.oversize = 3;
        let mut ports = PortCounters::default();
        ports.external.counters.imissed = 7;
        let row = now.row(
            &Report::default(),
            2.0,
            12.5,
            &ports,
            &PortCounters::default(),
        );
        let header = Report::header();
        assert_eq!(bars(&row), bars(&header), "\n{header}\n{row}");
        assert_eq!(row.chars().count(), header.chars().count());
        let cells: Vec<&str> = row.split_whitespace().collect();
        // t, then 1000 kpps in, 200 kpps out, yield, delay, held...
        assert_eq!(
            &cells[1..9],
            ["12.5", "|", "1000.0", "200.0", "95.9", "16/264", "0", "|"]
        );
        // ... max frame, then the interval's drops and missed frames.
        assert_eq!(&cells[11..17], ["9014", "|", "3", "7", "0", "0"]);
    }
}
