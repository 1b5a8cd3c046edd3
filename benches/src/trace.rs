//! A deterministic model of what one gateway core receives (SIGCOMM'26 §7.1): `F` TCP flows of
//! `R` Gb/s each, sending TSO-like 64 KB bursts, interleaved by a switch, delivered in RX bursts.
//!
//! The model, step by step:
//! 1. **Bursts.** Each flow sends bursts of [`TraceConfig::tso_bytes`] (64 KB: 45 segments of
//!    MSS 1448 B, each a 1514 B frame). Burst start times follow a Poisson process whose mean
//!    interval is `tso_bytes * 8 / R`, so the flow averages `R`. A burst that would start while
//!    the flow's previous burst is still on the wire starts when that one ends (a NIC sends one
//!    TSO burst at a time), which keeps every flow's sequence numbers in time order.
//! 2. **Segments.** Inside a burst, segments are spaced at the line rate of a
//!    [`TraceConfig::link_gbps`] link (1514 B at 100 Gb/s: 121.12 ns). They share one TCP time
//!    stamp (TSval, in milliseconds of simulated time, as a TSO engine copies one header), carry
//!    a bare ACK, DF set, an IPv4 ID counting up per segment, and correct IPv4 and TCP checksums.
//! 3. **Switch.** All flows' packets are merged in time order (ties by flow, then sequence).
//! 4. **Reordering.** Walking the merged sequence, each adjacent pair is swapped with
//!    probability [`TraceConfig::reorder_prob`] (0.1 %); packets swap places, time slots stay.
//!    Only a swap of two packets of the same flow reorders that flow.
//! 5. **RX bursts.** The sequence is cut into bursts of [`TraceConfig::rx_burst`] (32), each
//!    stamped with the arrival time of its last packet: the engine sees the burst at that time.
//!
//! Two other schedules replace steps 1 and 2, at the same average rates:
//! - [`Schedule::RoundRobin`]: a strict round robin of the flows (the setup of the rte_gro
//!   round-robin figures), the finest interleaving there is;
//! - [`Schedule::Paced`]: each flow sends one segment at a time, at its average rate, with
//!   jitter (every gap uniform in 0.5..1.5 times the mean, a random phase per flow), as flows
//!   arrive after an upstream bottleneck that spread their bursts out. Between the two
//!   extremes: flows interleave finely, but not in lockstep.
//!
//! **What the NIC would add** (and the engines are given outside their timed regions, as a NIC
//! writes it into the mbuf): the RSS hash, a Toeplitz hash over the 5-tuple with the default
//! key of `pxio::toeplitz` (the symmetric key the gateway programs into its ports), per flow
//! ([`Trace::rss_hash`]);
//! and the verdict that the L4 checksum is good (every frame's is).
//!
//! **Length.** A scenario lasts long enough for at least [`TraceConfig::min_packets`] packets
//! (so per-packet CPU cost is measured on a few hundred thousand packets) and for every flow to
//! send [`TraceConfig::min_bursts_per_flow`] bursts on average (3200 flows at 54 Mb/s: 48.5 ms
//! of simulated time, 720 k packets). See [`TraceConfig::duration_ns`].
//!
//! **Storage.** Frames are not stored: 720 k frames would take 1.1 GB. The trace keeps a
//! 12-byte record per packet and one 66-byte header template per flow, and
//! [`Trace::write_frame`] writes the exact frame into the caller's buffer (patching sequence,
//! IPv4 ID, TSval and both checksums). Every call gives the same bytes, so every engine run on a
//! trace sees identical input. The payload is a function of the flow and the byte's position in
//! the flow's stream, so merged output can be checked byte for byte ([`Trace::payload_matches`]).

use std::ops::Range;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};
use rand_pcg::Pcg64;

/// Offsets and sizes of the frames the trace writes: Ethernet II, IPv4 without options, TCP
/// with NOP, NOP, time stamps.
pub mod layout {
    /// Ethernet header.
    pub const ETH_LEN: usize = 14;
    /// IPv4 header (no options).
    pub const IPV4_LEN: usize = 20;
    /// TCP header with the 12-byte time-stamp option block.
    pub const TCP_LEN: usize = 32;
    /// All headers.
    pub const HEADERS_LEN: usize = ETH_LEN + IPV4_LEN + TCP_LEN;
    /// TCP payload per segment: a 1500 B MTU minus IPv4, TCP and time stamps.
    pub const MSS: usize = 1448;
    /// A full segment's frame (no FCS).
    pub const FRAME_LEN: usize = HEADERS_LEN + MSS;

    /// EtherType.
    pub const ETH_TYPE: usize = 12;
    /// IPv4 version and header length.
    pub const IP_VHL: usize = ETH_LEN;
    /// IPv4 total length.
    pub const IP_TOTAL_LEN: usize = ETH_LEN + 2;
    /// IPv4 identification.
    pub const IP_ID: usize = ETH_LEN + 4;
    /// IPv4 flags and fragment offset.
    pub const IP_FRAG: usize = ETH_LEN + 6;
    /// IPv4 time to live.
    pub const IP_TTL: usize = ETH_LEN + 8;
    /// IPv4 protocol.
    pub const IP_PROTO: usize = ETH_LEN + 9;
    /// IPv4 header checksum.
    pub const IP_CSUM: usize = ETH_LEN + 10;
    /// IPv4 source address.
    pub const IP_SRC: usize = ETH_LEN + 12;
    /// IPv4 destination address.
    pub const IP_DST: usize = ETH_LEN + 16;
    /// TCP header.
    pub const TCP: usize = ETH_LEN + IPV4_LEN;
    /// TCP source port.
    pub const TCP_SRC_PORT: usize = TCP;
    /// TCP destination port.
    pub const TCP_DST_PORT: usize = TCP + 2;
    /// TCP sequence number.
    pub const TCP_SEQ: usize = TCP + 4;
    /// TCP acknowledgment number.
    pub const TCP_ACK: usize = TCP + 8;
    /// TCP data offset.
    pub const TCP_DOFF: usize = TCP + 12;
    /// TCP flags.
    pub const TCP_FLAGS: usize = TCP + 13;
    /// TCP window.
    pub const TCP_WINDOW: usize = TCP + 14;
    /// TCP checksum.
    pub const TCP_CSUM: usize = TCP + 16;
    /// TCP options.
    pub const TCP_OPTS: usize = TCP + 20;
    /// TSval inside the time-stamp option (after NOP, NOP, kind, length).
    pub const TCP_TSVAL: usize = TCP_OPTS + 4;
    /// TSecr.
    pub const TCP_TSECR: usize = TCP_OPTS + 8;
}

use layout::*;

/// Where the fields are in one trace's frames: Ethernet II, then IPv4 without options
/// ([`layout`]'s constants) or IPv6 without extension headers, then TCP with NOP, NOP, time
/// stamps. Frames are 1514 B either way, so IPv6 segments carry 20 B less payload (1428 B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Whether the network layer is IPv6.
    pub v6: bool,
    /// Network-layer header bytes (20 or 40).
    pub l3_len: usize,
    /// Offset of the TCP header.
    pub tcp: usize,
    /// All headers.
    pub headers_len: usize,
    /// TCP payload per segment.
    pub mss: usize,
}

impl Layout {
    /// The layout of IPv4 (`v6 == false`) or IPv6 frames.
    pub const fn new(v6: bool) -> Self {
        let l3_len = if v6 { 40 } else { IPV4_LEN };
        let tcp = ETH_LEN + l3_len;
        let headers_len = tcp + TCP_LEN;
        Self {
            v6,
            l3_len,
            tcp,
            headers_len,
            mss: FRAME_LEN - headers_len,
        }
    }

    /// TCP sequence number.
    pub const fn tcp_seq(&self) -> usize {
        self.tcp + 4
    }

    /// TCP data offset.
    pub const fn tcp_doff(&self) -> usize {
        self.tcp + 12
    }

    /// TCP checksum.
    pub const fn tcp_csum(&self) -> usize {
        self.tcp + 16
    }

    /// TCP options.
    pub const fn tcp_opts(&self) -> usize {
        self.tcp + 20
    }

    /// TSval.
    pub const fn tcp_tsval(&self) -> usize {
        self.tcp + 24
    }

    /// The source address's last four bytes, which tell the flow.
    pub const fn src_low32(&self) -> usize {
        if self.v6 {
            ETH_LEN + 8 + 12
        } else {
            IP_SRC
        }
    }
}

/// The IPv6 sources: `2001:2::` (the benchmarking range) with the IPv4 trace's source address
/// in the last four bytes.
const SRC6_PREFIX: [u8; 12] = [0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0];
/// The IPv6 receiver.
const DST6_ADDR: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// The first source address; flow `i` sends from `SRC_BASE + i` (198.18.0.0/15, the
/// benchmarking range, holds 131072 flows).
const SRC_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
/// Most flows a trace can have (the size of 198.18.0.0/15).
pub const MAX_FLOWS: u32 = 1 << 17;
/// The receiver inside the b-network.
const DST_ADDR: [u8; 4] = [10, 0, 0, 2];
const DST_PORT: u16 = 5201;
/// The upstream router's MAC and the gateway's.
const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const TTL: u8 = 57;
const WINDOW: u16 = 1024;
/// Bytes a frame occupies on the wire beyond its own: preamble, SFD and inter-frame gap are
/// not modelled, as the model fixes 121 ns per 1514 B frame at 100 Gb/s.
const WIRE_OVERHEAD: usize = 0;
/// Period of the payload pattern; prime, so that no two segments of a flow look alike.
const PATTERN_PERIOD: usize = 251;

/// How flows send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// The default model: 64 KB TSO bursts on a Poisson schedule, segments at line rate.
    #[default]
    PoissonTso,
    /// Every flow sends one segment in turn, evenly spaced (flow 0, 1, ..., F-1, 0, ...): the
    /// interleaving of the rte_gro round-robin figures, the worst case for a per-flow table.
    RoundRobin,
    /// Every flow sends one segment at a time at its average rate, each gap uniform in 0.5..1.5
    /// times the mean, from a random phase: flows after an upstream bottleneck.
    Paced,
}

impl Schedule {
    /// All schedules, burstiest first.
    pub const ALL: [Schedule; 3] = [Schedule::PoissonTso, Schedule::Paced, Schedule::RoundRobin];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::PoissonTso => "poisson-tso",
            Schedule::RoundRobin => "round-robin",
            Schedule::Paced => "paced",
        }
    }
}

/// How far a paced flow's gaps stray from their mean, either way (0.5: uniform in 0.5..1.5).
pub const PACED_JITTER: f64 = 0.5;

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceConfig {
    /// Number of flows `F`.
    pub flows: u32,
    /// Each flow's average rate `R`, in Gb/s.
    pub gbps_per_flow: f64,
    /// Seed of the generator: same seed, same trace.
    pub seed: u64,
    /// How flows send (steps 1 and 2 of the model; the rest applies to both).
    pub schedule: Schedule,
    /// Bytes per TSO burst (64 KB); a burst is `tso_bytes / MSS` full segments (45).
    pub tso_bytes: u32,
    /// Line rate of the sender's link, in Gb/s: spacing of segments inside a burst.
    pub link_gbps: f64,
    /// Probability that an adjacent pair of packets is swapped.
    pub reorder_prob: f64,
    /// Packets per RX burst.
    pub rx_burst: usize,
    /// The trace lasts at least long enough for this many packets on average...
    pub min_packets: u64,
    /// ...and for each flow to send this many bursts on average.
    pub min_bursts_per_flow: f64,
    /// IPv6 frames instead of IPv4 ([`Layout`]).
    pub ipv6: bool,
}

impl TraceConfig {
    /// The default model for `flows` flows of `gbps_per_flow` each, with the default sizing.
    pub fn new(flows: u32, gbps_per_flow: f64) -> Self {
        Self {
            flows,
            gbps_per_flow,
            seed: 1,
            schedule: Schedule::PoissonTso,
            tso_bytes: 64 * 1024,
            link_gbps: 100.0,
            reorder_prob: 0.001,
            rx_burst: 32,
            min_packets: 300_000,
            min_bursts_per_flow: 5.0,
            ipv6: false,
        }
    }

    /// Where the fields are in this trace's frames.
    pub fn layout(&self) -> Layout {
        Layout::new(self.ipv6)
    }

    /// Full segments per TSO burst.
    pub fn segments_per_burst(&self) -> u32 {
        self.tso_bytes / self.layout().mss as u32
    }

    /// Mean time between a flow's burst starts: `tso_bytes * 8 / R` (Gb/s is bits per ns).
    pub fn mean_burst_interval_ns(&self) -> f64 {
        f64::from(self.tso_bytes) * 8.0 / self.gbps_per_flow
    }

    /// Spacing of segments inside a burst: one frame's time on the link.
    pub fn segment_spacing_ns(&self) -> f64 {
        ((FRAME_LEN + WIRE_OVERHEAD) * 8) as f64 / self.link_gbps
    }

    /// Simulated duration: the longer of the time `min_packets` take at the aggregate rate and
    /// `min_bursts_per_flow` mean burst intervals.
    pub fn duration_ns(&self) -> f64 {
        let interval = self.mean_burst_interval_ns();
        let pps_per_ns = f64::from(self.flows) * f64::from(self.segments_per_burst()) / interval;
        (self.min_packets as f64 / pps_per_ns).max(self.min_bursts_per_flow * interval)
    }

    fn validate(&self) -> Result<(), TraceError> {
        let bad = |what: String| Err(TraceError(what));
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return bad(format!("flows must be 1..={MAX_FLOWS}, not {}", self.flows));
        }
        if !(self.gbps_per_flow > 0.0 && self.gbps_per_flow.is_finite()) {
            return bad(format!("rate {} Gb/s is not positive", self.gbps_per_flow));
        }
        if !(self.link_gbps > 0.0 && self.link_gbps.is_finite()) {
            return bad(format!("link rate {} Gb/s is not positive", self.link_gbps));
        }
        if self.segments_per_burst() == 0 {
            return bad(format!(
                "a TSO burst of {} B holds no full segment",
                self.tso_bytes
            ));
        }
        if !(0.0..=1.0).contains(&self.reorder_prob) {
            return bad(format!(
                "reorder probability {} is not in [0, 1]",
                self.reorder_prob
            ));
        }
        if self.rx_burst == 0 {
            return bad("RX bursts must hold at least one packet".into());
        }
        Ok(())
    }
}

/// A configuration the generator cannot honour.
#[derive(Debug, thiserror::Error)]
#[error("bad trace configuration: {0}")]
pub struct TraceError(String);

/// One flow's fixed header and the partial checksums that exclude the per-packet fields.
#[derive(Clone, Debug)]
struct FlowHeader {
    template: Vec<u8>,
    isn: u32,
    ip_id0: u16,
    salt: u8,
    /// One's-complement sum of the IPv4 header with ID and checksum zero.
    ip_partial: u64,
    /// Pseudo-header plus TCP header with sequence, TSval and checksum zero.
    tcp_partial: u64,
    /// The Toeplitz hash a NIC would report for the flow.
    rss: u32,
}

/// One packet of the trace, in delivery order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PacketRec {
    flow: u32,
    /// Segment number within the flow's stream (0, 1, ...): sequence `isn + seg * MSS`.
    seg: u32,
    tsval: u32,
}

/// One RX burst: what the engine receives at `time_ns`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxBurst {
    /// Index of the burst in the trace.
    pub index: usize,
    /// Simulated time the burst is delivered: the arrival of its last packet.
    pub time_ns: u64,
    /// The packets' slots, for [`Trace::write_frame`].
    pub slots: Range<usize>,
}

impl RxBurst {
    /// Packets in the burst.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it has no packet (never, for a trace's bursts).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// A generated trace. See the module documentation for the model.
#[derive(Debug)]
pub struct Trace {
    config: TraceConfig,
    flows: Vec<FlowHeader>,
    packets: Vec<PacketRec>,
    /// Arrival time of each slot (non-decreasing).
    arrival_ns: Vec<u64>,
    /// `slot_of[flow_start[f] + seg]` is the slot of flow `f`'s segment `seg`.
    flow_start: Vec<u32>,
    slot_of: Vec<u32>,
    /// `(k % PATTERN_PERIOD)` for `PATTERN_PERIOD + MSS` bytes: payload source.
    pattern: Vec<u8>,
    swaps: u64,
    same_flow_swaps: u64,
}

impl Trace {
    /// Generates the trace `config` describes.
    pub fn generate(config: TraceConfig) -> Result<Self, TraceError> {
        config.validate()?;
        let mut rng = Pcg64::seed_from_u64(config.seed);
        let interval = config.mean_burst_interval_ns();
        let gaps = Exp::new(1.0 / interval).map_err(|e| TraceError(e.to_string()))?;
        let spacing = config.segment_spacing_ns();
        let segs = config.segments_per_burst();
        let duration = config.duration_ns();

        let flows: Vec<FlowHeader> = (0..config.flows)
            .map(|f| FlowHeader::new(f, config.layout(), &mut rng))
            .collect();

        // Steps 1 and 2: every flow's bursts and segments.
        let expected = (f64::from(config.flows) * duration / interval * f64::from(segs)) as usize;
        let mut timed: Vec<(u64, PacketRec)> = Vec::with_capacity(expected + expected / 8 + 64);
        let mut flow_segs = vec![0u32; config.flows as usize];
        match config.schedule {
            Schedule::PoissonTso => {
                for (f, seg_count) in flow_segs.iter_mut().enumerate() {
                    let ts_base = flows[f].isn.rotate_left(7); // any per-flow offset will do
                    let mut start = gaps.sample(&mut rng);
                    let mut free_at = 0.0f64;
                    while start < duration {
                        let begin = start.max(free_at);
                        let tsval = ts_base.wrapping_add((begin / 1e6) as u32);
                        for s in 0..segs {
                            let t = (begin + f64::from(s) * spacing).round() as u64;
                            let (flow, seg) = (f as u32, *seg_count);
                            timed.push((t, PacketRec { flow, seg, tsval }));
                            *seg_count += 1;
                        }
                        free_at = begin + f64::from(segs) * spacing;
                        start += gaps.sample(&mut rng);
                    }
                }
            }
            Schedule::Paced => {
                let mean = interval / f64::from(segs);
                for (f, seg_count) in flow_segs.iter_mut().enumerate() {
                    let ts_base = flows[f].isn.rotate_left(7);
                    let mut t = rng.gen::<f64>() * mean;
                    while t < duration {
                        let tsval = ts_base.wrapping_add((t / 1e6) as u32);
                        let (flow, seg) = (f as u32, *seg_count);
                        timed.push((t.round() as u64, PacketRec { flow, seg, tsval }));
                        *seg_count += 1;
                        let jitter = PACED_JITTER * (2.0 * rng.gen::<f64>() - 1.0);
                        // Never closer than the line rate lets two frames be.
                        t += (mean * (1.0 + jitter)).max(spacing);
                    }
                }
            }
            Schedule::RoundRobin => {
                // Slot k belongs to flow k mod F; each flow still averages R.
                let slot_ns = interval / f64::from(segs) / f64::from(config.flows);
                let slots = (duration / slot_ns) as u64;
                for k in 0..slots {
                    let f = (k % u64::from(config.flows)) as usize;
                    let t = k as f64 * slot_ns;
                    let ts_base = flows[f].isn.rotate_left(7);
                    let tsval = ts_base.wrapping_add((t / 1e6) as u32);
                    let (flow, seg) = (f as u32, flow_segs[f]);
                    timed.push((t.round() as u64, PacketRec { flow, seg, tsval }));
                    flow_segs[f] += 1;
                }
            }
        }

        // Step 3: the switch.
        timed.sort_unstable_by_key(|(t, p)| (*t, p.flow, p.seg));
        let (arrival_ns, mut packets): (Vec<u64>, Vec<PacketRec>) = timed.into_iter().unzip();

        // Step 4: adjacent swaps.
        let (mut swaps, mut same_flow_swaps) = (0, 0);
        let mut i = 0;
        while i + 1 < packets.len() {
            if rng.gen_bool(config.reorder_prob) {
                packets.swap(i, i + 1);
                swaps += 1;
                same_flow_swaps += u64::from(packets[i].flow == packets[i + 1].flow);
                i += 2;
            } else {
                i += 1;
            }
        }

        // The index from (flow, segment) to slot, for output accounting.
        let mut flow_start = Vec::with_capacity(flow_segs.len() + 1);
        let mut total = 0u32;
        for &n in &flow_segs {
            flow_start.push(total);
            total += n;
        }
        flow_start.push(total);
        let mut slot_of = vec![u32::MAX; total as usize];
        for (slot, p) in packets.iter().enumerate() {
            slot_of[(flow_start[p.flow as usize] + p.seg) as usize] = slot as u32;
        }

        let pattern = (0..PATTERN_PERIOD + config.layout().mss)
            .map(|k| (k % PATTERN_PERIOD) as u8)
            .collect();
        Ok(Self {
            config,
            flows,
            packets,
            arrival_ns,
            flow_start,
            slot_of,
            pattern,
            swaps,
            same_flow_swaps,
        })
    }

    /// The configuration it was generated from.
    pub fn config(&self) -> &TraceConfig {
        &self.config
    }

    /// Where the fields are in this trace's frames.
    pub fn layout(&self) -> Layout {
        self.config.layout()
    }

    /// Input packets.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// Whether the trace has no packet (a very short trace of slow flows can be empty).
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Input TCP payload bytes (every packet carries a full segment).
    pub fn payload_bytes(&self) -> u64 {
        self.packets.len() as u64 * self.layout().mss as u64
    }

    /// Arrival time of slot `slot`'s packet on the wire.
    pub fn arrival_ns(&self, slot: usize) -> u64 {
        self.arrival_ns[slot]
    }

    /// Simulated time of the last packet's arrival (0 for an empty trace).
    pub fn end_ns(&self) -> u64 {
        self.arrival_ns.last().copied().unwrap_or(0)
    }

    /// Adjacent pairs swapped, and how many of them were two packets of one flow.
    pub fn swaps(&self) -> (u64, u64) {
        (self.swaps, self.same_flow_swaps)
    }

    /// RX bursts in delivery order.
    pub fn bursts(&self) -> impl ExactSizeIterator<Item = RxBurst> + '_ {
        let n = self.packets.len();
        let size = self.config.rx_burst;
        (0..n.div_ceil(size)).map(move |index| {
            let slots = index * size..((index + 1) * size).min(n);
            RxBurst {
                index,
                time_ns: self.arrival_ns[slots.end - 1],
                slots,
            }
        })
    }

    /// The simulated time at which slot `slot`'s packet reaches the engine: its RX burst's time.
    pub fn delivery_ns(&self, slot: usize) -> u64 {
        let size = self.config.rx_burst;
        let last = ((slot / size + 1) * size).min(self.packets.len()) - 1;
        self.arrival_ns[last]
    }

    /// Writes slot `slot`'s frame into `out` and returns its length ([`FRAME_LEN`]).
    ///
    /// # Panics
    /// When `out` is shorter than [`FRAME_LEN`] or `slot` is out of range.
    pub fn write_frame(&self, slot: usize, out: &mut [u8]) -> usize {
        let p = self.packets[slot];
        let flow = &self.flows[p.flow as usize];
        let l = self.layout();
        let out = &mut out[..FRAME_LEN];
        out[..l.headers_len].copy_from_slice(&flow.template);

        let seq = flow.isn.wrapping_add(p.seg.wrapping_mul(l.mss as u32));
        if !l.v6 {
            let ip_id = flow.ip_id0.wrapping_add(p.seg as u16);
            out[IP_ID..IP_ID + 2].copy_from_slice(&ip_id.to_be_bytes());
            let ip_sum = flow.ip_partial + u64::from(ip_id);
            out[IP_CSUM..IP_CSUM + 2].copy_from_slice(&(!fold(ip_sum)).to_be_bytes());
        }
        let (seq_at, tsval_at) = (l.tcp_seq(), l.tcp_tsval());
        out[seq_at..seq_at + 4].copy_from_slice(&seq.to_be_bytes());
        out[tsval_at..tsval_at + 4].copy_from_slice(&p.tsval.to_be_bytes());

        let start = (p.seg as usize * l.mss) % PATTERN_PERIOD;
        let payload = &mut out[l.headers_len..];
        for (d, s) in payload.iter_mut().zip(&self.pattern[start..start + l.mss]) {
            *d = s ^ flow.salt;
        }
        let tcp_sum = flow.tcp_partial
            + u64::from(seq >> 16)
            + u64::from(seq & 0xffff)
            + u64::from(p.tsval >> 16)
            + u64::from(p.tsval & 0xffff)
            + sum_be16(payload);
        let csum_at = l.tcp_csum();
        out[csum_at..csum_at + 2].copy_from_slice(&(!fold(tcp_sum)).to_be_bytes());
        FRAME_LEN
    }

    /// The RSS hash a NIC would have written into slot `slot`'s mbuf: Toeplitz over the
    /// 5-tuple, with the default key of `pxio::toeplitz`.
    pub fn rss_hash(&self, slot: usize) -> u32 {
        self.flows[self.packets[slot].flow as usize].rss
    }

    /// Slot `slot`'s frame, in a new vector (tests, slow paths).
    pub fn frame(&self, slot: usize) -> Vec<u8> {
        let mut v = vec![0; FRAME_LEN];
        self.write_frame(slot, &mut v);
        v
    }

    /// The flow that sends from IPv4 source `src` (host order), if any.
    pub fn flow_of_source(&self, src: u32) -> Option<u32> {
        let f = src.wrapping_sub(SRC_BASE);
        (f < self.config.flows).then_some(f)
    }

    /// The byte offset of sequence number `seq` in flow `flow`'s stream, if inside it.
    pub fn stream_offset(&self, flow: u32, seq: u32) -> Option<usize> {
        let off = seq.wrapping_sub(self.flows.get(flow as usize)?.isn) as usize;
        let f = flow as usize;
        let segs = (self.flow_start.get(f + 1)? - self.flow_start.get(f)?) as usize;
        (off < segs * self.layout().mss).then_some(off)
    }

    /// The segment of flow `flow` that starts at sequence number `seq`, if any.
    pub fn segment_of(&self, flow: u32, seq: u32) -> Option<u32> {
        let off = seq.wrapping_sub(self.flows.get(flow as usize)?.isn);
        let mss = self.layout().mss as u32;
        (off % mss == 0).then_some(off / mss)
    }

    /// The slot of flow `flow`'s segment `seg`, if the flow sent it.
    pub fn slot_of(&self, flow: u32, seg: u32) -> Option<usize> {
        let f = flow as usize;
        let (start, end) = (*self.flow_start.get(f)?, *self.flow_start.get(f + 1)?);
        (seg < end - start).then(|| self.slot_of[(start + seg) as usize] as usize)
    }

    /// Whether `bytes` are flow `flow`'s stream bytes from segment `seg`'s first byte on.
    pub fn payload_matches(
        &self,
        flow: u32,
        seg: u32,
        offset_in_output: usize,
        bytes: &[u8],
    ) -> bool {
        let Some(h) = self.flows.get(flow as usize) else {
            return false;
        };
        let base = seg as usize * self.layout().mss + offset_in_output;
        bytes
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((base + i) % PATTERN_PERIOD) as u8 ^ h.salt)
    }

    /// Heap bytes the trace holds (records, times, indexes, headers).
    pub fn heap_bytes(&self) -> usize {
        self.packets.capacity() * std::mem::size_of::<PacketRec>()
            + self.arrival_ns.capacity() * 8
            + self.slot_of.capacity() * 4
            + self.flow_start.capacity() * 4
            + self.flows.capacity() * std::mem::size_of::<FlowHeader>()
            + self.pattern.capacity()
    }
}

impl FlowHeader {
    fn new(flow: u32, l: Layout, rng: &mut Pcg64) -> Self {
        let src = (SRC_BASE + flow).to_be_bytes();
        // A random ephemeral port (Linux's 32768..61000). Not `32768 + flow`: under the
        // gateway's symmetric RSS key the hash depends on the XOR of the tuple's 16-bit words,
        // and address and port counting up together gave every flow the same hash.
        let src_port = 32768 + rng.gen_range(0..28232u16);
        let isn: u32 = rng.gen();
        let ip_id0: u16 = rng.gen();
        let ack: u32 = rng.gen();
        let tsecr: u32 = rng.gen();

        let mut h = vec![0u8; l.headers_len];
        h[0..6].copy_from_slice(&DST_MAC);
        h[6..12].copy_from_slice(&SRC_MAC);
        let tcp_len = TCP_LEN + l.mss;
        let (pseudo, ip_partial, rss) = if l.v6 {
            let src6: [u8; 16] = [&SRC6_PREFIX[..], &src[..]]
                .concat()
                .try_into()
                .expect("16");
            h[ETH_TYPE..ETH_TYPE + 2].copy_from_slice(&0x86ddu16.to_be_bytes());
            h[ETH_LEN] = 0x60;
            h[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            h[ETH_LEN + 6] = 6; // next header: TCP
            h[ETH_LEN + 7] = TTL;
            h[ETH_LEN + 8..ETH_LEN + 24].copy_from_slice(&src6);
            h[ETH_LEN + 24..ETH_LEN + 40].copy_from_slice(&DST6_ADDR);
            let pseudo = sum_be16(&h[ETH_LEN + 8..ETH_LEN + 40]) + 6 + tcp_len as u64;
            let rss =
                pxio::toeplitz::Toeplitz::default().hash_v6(src6, DST6_ADDR, src_port, DST_PORT);
            (pseudo, 0, rss)
        } else {
            h[ETH_TYPE..ETH_TYPE + 2].copy_from_slice(&0x0800u16.to_be_bytes());
            h[IP_VHL] = 0x45;
            let ip_total = (IPV4_LEN + tcp_len) as u16;
            h[IP_TOTAL_LEN..IP_TOTAL_LEN + 2].copy_from_slice(&ip_total.to_be_bytes());
            h[IP_FRAG..IP_FRAG + 2].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
            h[IP_TTL] = TTL;
            h[IP_PROTO] = 6;
            h[IP_SRC..IP_SRC + 4].copy_from_slice(&src);
            h[IP_DST..IP_DST + 4].copy_from_slice(&DST_ADDR);
            let pseudo = sum_be16(&h[IP_SRC..IP_DST + 4]) + 6 + tcp_len as u64;
            let rss =
                pxio::toeplitz::Toeplitz::default().hash_v4(src, DST_ADDR, src_port, DST_PORT);
            (pseudo, sum_be16(&h[ETH_LEN..TCP]), rss)
        };
        let t = l.tcp;
        h[t..t + 2].copy_from_slice(&src_port.to_be_bytes());
        h[t + 2..t + 4].copy_from_slice(&DST_PORT.to_be_bytes());
        h[t + 8..t + 12].copy_from_slice(&ack.to_be_bytes());
        h[l.tcp_doff()] = ((TCP_LEN / 4) as u8) << 4;
        h[t + 13] = 0x10; // ACK
        h[t + 14..t + 16].copy_from_slice(&WINDOW.to_be_bytes());
        let o = l.tcp_opts();
        h[o..o + 4].copy_from_slice(&[1, 1, 8, 10]); // NOP, NOP, TS
        h[o + 8..o + 12].copy_from_slice(&tsecr.to_be_bytes());

        let tcp_partial = pseudo + sum_be16(&h[t..l.headers_len]);
        Self {
            rss,
            template: h,
            isn,
            ip_id0,
            salt: flow as u8,
            ip_partial,
            tcp_partial,
        }
    }
}

/// Sum of big-endian 16-bit words (`bytes` has even length here).
fn sum_be16(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
        .sum()
}

/// Folds a one's-complement sum to 16 bits.
fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(flows: u32, gbps: f64) -> TraceConfig {
        TraceConfig {
            min_packets: 20_000,
            ..TraceConfig::new(flows, gbps)
        }
    }

    #[test]
    fn same_seed_same_trace_other_seed_other_trace() {
        let a = Trace::generate(small(8, 10.0)).unwrap();
        let b = Trace::generate(small(8, 10.0)).unwrap();
        assert_eq!(a.packets, b.packets);
        assert_eq!(a.arrival_ns, b.arrival_ns);
        assert_eq!(a.frame(123), b.frame(123));
        let c = Trace::generate(TraceConfig {
            seed: 2,
            ..small(8, 10.0)
        })
        .unwrap();
        assert_ne!(a.arrival_ns, c.arrival_ns);
    }

    #[test]
    fn rates_burst_sizes_and_spacing_follow_the_model() {
        let cfg = TraceConfig {
            min_packets: 100_000,
            ..TraceConfig::new(64, 2.0)
        };
        let t = Trace::generate(cfg.clone()).unwrap();
        let secs = cfg.duration_ns() / 1e9;
        let gbps = t.payload_bytes() as f64 * 8.0 / 1e9 / secs / 64.0;
        // 45 * 1448 payload bytes per 64 KiB of rate budget.
        let expected = 2.0 * (45.0 * 1448.0) / 65536.0;
        assert!(
            (gbps - expected).abs() / expected < 0.1,
            "{gbps} vs {expected}"
        );
        assert!(t.arrival_ns.windows(2).all(|w| w[0] <= w[1]));
        assert!((cfg.segment_spacing_ns() - 121.12).abs() < 1e-9);
        // Every flow sends whole bursts, in time order.
        for f in 0..64 {
            let n = t.flow_start[f + 1] - t.flow_start[f];
            assert_eq!(n % 45, 0);
        }
        let bursts: Vec<RxBurst> = t.bursts().collect();
        assert!(bursts[..bursts.len() - 1].iter().all(|b| b.len() == 32));
        assert_eq!(bursts.iter().map(RxBurst::len).sum::<usize>(), t.len());
        assert!(bursts.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        assert_eq!(t.delivery_ns(33), bursts[1].time_ns);
    }

    #[test]
    fn about_one_pair_in_a_thousand_is_swapped() {
        let t = Trace::generate(small(1, 10.0)).unwrap();
        let (swaps, same_flow) = t.swaps();
        let rate = swaps as f64 / t.len() as f64;
        assert!((0.0005..0.0015).contains(&rate), "{rate}");
        assert_eq!(swaps, same_flow, "one flow: every swap reorders it");
        let reordered = t.packets.windows(2).filter(|w| w[1].seg < w[0].seg).count() as u64;
        assert_eq!(reordered, swaps);
    }

    #[test]
    fn index_maps_flow_and_sequence_back_to_slots() {
        let t = Trace::generate(small(100, 2.0)).unwrap();
        for slot in (0..t.len()).step_by(997) {
            let frame = t.frame(slot);
            let src = u32::from_be_bytes(frame[IP_SRC..IP_SRC + 4].try_into().unwrap());
            let seq = u32::from_be_bytes(frame[TCP_SEQ..TCP_SEQ + 4].try_into().unwrap());
            let flow = t.flow_of_source(src).unwrap();
            let seg = t.segment_of(flow, seq).unwrap();
            assert_eq!(t.slot_of(flow, seg), Some(slot));
            assert!(t.payload_matches(flow, seg, 0, &frame[HEADERS_LEN..]));
            assert!(!t.payload_matches(flow, seg + 1, 0, &frame[HEADERS_LEN..]));
        }
    }

    #[test]
    fn frames_are_valid_tcp_ipv4_with_correct_checksums() {
        use etherparse::{NetSlice, SlicedPacket, TransportSlice};
        let t = Trace::generate(small(8, 10.0)).unwrap();
        for slot in (0..t.len()).step_by(101) {
            let frame = t.frame(slot);
            assert_eq!(frame.len(), 1514);
            let p = SlicedPacket::from_ethernet(&frame).unwrap();
            let Some(NetSlice::Ipv4(ip)) = &p.net else {
                panic!("not IPv4")
            };
            let ip_hdr = ip.header().to_header();
            assert_eq!(ip_hdr.header_checksum, ip_hdr.calc_header_checksum());
            assert!(ip_hdr.dont_fragment);
            assert_eq!(ip_hdr.total_len, 1500);
            let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
                panic!("not TCP")
            };
            let tcp_hdr = tcp.to_header();
            assert!(tcp_hdr.ack && !tcp_hdr.psh && !tcp_hdr.syn && !tcp_hdr.fin);
            assert_eq!(tcp.payload().len(), MSS);
            assert_eq!(
                tcp_hdr.checksum,
                tcp_hdr.calc_checksum_ipv4(&ip_hdr, tcp.payload()).unwrap()
            );
        }
    }

    #[test]
    fn ipv6_frames_are_valid_tcp_with_correct_checksums_and_map_back() {
        use etherparse::{NetSlice, SlicedPacket, TransportSlice};
        let t = Trace::generate(TraceConfig {
            ipv6: true,
            ..small(100, 2.0)
        })
        .unwrap();
        let l = t.layout();
        assert_eq!((l.headers_len, l.mss), (86, 1428));
        let toeplitz = pxio::toeplitz::Toeplitz::default();
        for slot in (0..t.len()).step_by(101) {
            let frame = t.frame(slot);
            assert_eq!(frame.len(), 1514);
            let p = SlicedPacket::from_ethernet(&frame).unwrap();
            let Some(NetSlice::Ipv6(ip)) = &p.net else {
                panic!("not IPv6")
            };
            let ip_hdr = ip.header().to_header();
            assert_eq!(ip_hdr.payload_length as usize, 32 + 1428);
            let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
                panic!("not TCP")
            };
            let tcp_hdr = tcp.to_header();
            assert_eq!(tcp.payload().len(), 1428);
            assert_eq!(
                tcp_hdr.checksum,
                tcp_hdr.calc_checksum_ipv6(&ip_hdr, tcp.payload()).unwrap()
            );
            assert_eq!(&frame[l.tcp_opts()..l.tcp_opts() + 4], &[1, 1, 8, 10]);
            let hash = toeplitz.hash_v6(
                ip_hdr.source,
                ip_hdr.destination,
                tcp.source_port(),
                tcp.destination_port(),
            );
            assert_eq!(t.rss_hash(slot), hash);
            let src =
                u32::from_be_bytes(frame[l.src_low32()..l.src_low32() + 4].try_into().unwrap());
            let seq = u32::from_be_bytes(frame[l.tcp_seq()..l.tcp_seq() + 4].try_into().unwrap());
            let flow = t.flow_of_source(src).unwrap();
            let seg = t.segment_of(flow, seq).unwrap();
            assert_eq!(t.slot_of(flow, seg), Some(slot));
            assert!(t.payload_matches(flow, seg, 0, &frame[86..]));
        }
        // 45 segments of 1428 B fit a 64 KiB TSO burst (65,536 / 1428 = 45.9).
        assert_eq!(t.config().segments_per_burst(), 45);
    }

    #[test]
    fn round_robin_cycles_through_the_flows() {
        let t = Trace::generate(TraceConfig {
            schedule: Schedule::RoundRobin,
            reorder_prob: 0.0,
            ..small(64, 2.0)
        })
        .unwrap();
        assert!(t.len() >= 19_000);
        assert!(t
            .packets
            .iter()
            .enumerate()
            .all(|(k, p)| p.flow as usize == k % 64));
        assert!(t.arrival_ns.windows(2).all(|w| w[0] <= w[1]));
    }

    /// What the NIC and the sender give both engines: Linux's NOP, NOP, time-stamp options with
    /// a TSval that moves with the (millisecond) clock, and the flow's Toeplitz hash.
    #[test]
    fn frames_carry_linux_time_stamps_and_the_nic_hash() {
        use etherparse::{SlicedPacket, TcpOptionElement, TransportSlice};
        let t = Trace::generate(TraceConfig {
            min_packets: 200_000,
            ..TraceConfig::new(8, 10.0)
        })
        .unwrap();
        let toeplitz = pxio::toeplitz::Toeplitz::default();
        let mut last_tsval: Vec<Option<u32>> = vec![None; 8];
        let mut tsvals_seen = std::collections::BTreeSet::new();
        for slot in 0..t.len() {
            let frame = t.frame(slot);
            let p = SlicedPacket::from_ethernet(&frame).unwrap();
            let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
                panic!("not TCP")
            };
            assert_eq!(&frame[TCP_OPTS..TCP_OPTS + 4], &[1, 1, 8, 10], "NOP NOP TS");
            let opts: Vec<_> = tcp.options_iterator().map(Result::unwrap).collect();
            let [TcpOptionElement::Noop, TcpOptionElement::Noop, TcpOptionElement::Timestamp(tsval, _)] =
                opts[..]
            else {
                panic!("options {opts:?}")
            };
            let src: [u8; 4] = frame[IP_SRC..IP_SRC + 4].try_into().unwrap();
            let flow = t.flow_of_source(u32::from_be_bytes(src)).unwrap() as usize;
            let hash = toeplitz.hash_v4(src, DST_ADDR, tcp.source_port(), tcp.destination_port());
            assert_eq!(t.rss_hash(slot), hash);
            // Time stamps never go back within a flow (swaps aside, one millisecond apart at most).
            if let Some(prev) = last_tsval[flow] {
                assert!(tsval.wrapping_sub(prev) < 1000 || prev.wrapping_sub(tsval) <= 1);
            }
            last_tsval[flow] = Some(tsval);
            tsvals_seen.insert((flow, tsval));
        }
        // The trace lasts milliseconds: every flow's TSval advanced at least once.
        let ms = t.end_ns() / 1_000_000;
        assert!(ms >= 2, "{ms} ms");
        for f in 0..8 {
            assert!(tsvals_seen.iter().filter(|(g, _)| *g == f).count() as u64 >= ms);
        }
        let hashes: std::collections::BTreeSet<u32> = (0..t.len()).map(|s| t.rss_hash(s)).collect();
        assert_eq!(hashes.len(), 8, "one hash per flow");
        // Under the symmetric key hashes can only take 2^16 values; 3200 flows still spread.
        let many = Trace::generate(TraceConfig {
            min_packets: 1,
            min_bursts_per_flow: 0.01,
            ..TraceConfig::new(3200, 0.054)
        })
        .unwrap();
        let spread: std::collections::BTreeSet<u32> = many.flows.iter().map(|f| f.rss).collect();
        assert!(spread.len() > 3000, "{} distinct hashes", spread.len());
    }

    #[test]
    fn paced_flows_interleave_with_jitter_at_their_rate() {
        let cfg = TraceConfig {
            schedule: Schedule::Paced,
            reorder_prob: 0.0,
            ..small(64, 2.0)
        };
        let t = Trace::generate(cfg.clone()).unwrap();
        let mean = cfg.mean_burst_interval_ns() / f64::from(cfg.segments_per_burst());
        let mut gaps = Vec::new();
        let mut last = vec![None; 64];
        for (slot, p) in t.packets.iter().enumerate() {
            if let Some(prev) = last[p.flow as usize] {
                gaps.push((t.arrival_ns[slot] - prev) as f64);
            }
            last[p.flow as usize] = Some(t.arrival_ns[slot]);
        }
        let avg = gaps.iter().sum::<f64>() / gaps.len() as f64;
        assert!((avg - mean).abs() / mean < 0.02, "{avg} vs {mean}");
        let (lo, hi) = gaps
            .iter()
            .fold((f64::MAX, 0.0f64), |(l, h), &g| (l.min(g), h.max(g)));
        assert!(
            lo >= 0.5 * mean - 1.0 && hi <= 1.5 * mean + 1.0,
            "{lo}..{hi}"
        );
        assert!(lo < 0.6 * mean && hi > 1.4 * mean, "jitter spans the range");
        // Not round robin: the order of the flows drifts.
        let rr_like = t
            .packets
            .iter()
            .enumerate()
            .filter(|(k, p)| p.flow as usize == k % 64)
            .count();
        assert!(rr_like < t.len() / 4, "{rr_like}");
        // But no TSO trains either: runs of one flow stay short.
        let mut longest = (0, 1);
        for w in t.packets.windows(2) {
            longest.1 = if w[0].flow == w[1].flow {
                longest.1 + 1
            } else {
                1
            };
            longest.0 = longest.0.max(longest.1);
        }
        assert!(longest.0 < 10, "{}", longest.0);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(Trace::generate(TraceConfig::new(0, 1.0)).is_err());
        assert!(Trace::generate(TraceConfig::new(1, 0.0)).is_err());
        assert!(Trace::generate(TraceConfig {
            reorder_prob: 2.0,
            ..TraceConfig::new(1, 1.0)
        })
        .is_err());
    }
}
