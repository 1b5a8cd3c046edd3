//! What the gateway bench feeds a gateway: the frames of each scenario, in RX bursts from the
//! outside or the inside port, with the handshakes played before them.
//!
//! Inbound TCP data is the merge bench's [`Trace`] (its frames, schedule and RX bursts, so its
//! [`Ledger`](crate::ledger::Ledger) judges the output). Everything else is written here, from
//! compact records, on demand (an 8,948 B segment per record would not fit in memory):
//!
//! - **outbound TCP**: inside hosts sending iMTU-sized segments (8,948 B of payload over IPv4
//!   with time stamps) to outside peers. Their schedule is a [`Trace`]'s too (Poisson TSO bursts
//!   of 7 segments, 64 KB, at the line rate of 9,014 B frames), each slot one segment.
//! - **ACKs from the outside** for those segments: the peer acknowledges every second 1,448 B
//!   piece it receives (RFC 5681's delayed ACK), [`PEER_RTT_NS`] after the segment crossed.
//! - **ACKs from the inside** for inbound data (the mix only): the inside host acknowledges every
//!   second merged segment, [`INSIDE_RTT_NS`] after the data arrived.
//! - **UDP** datagrams (QUIC-like, 1,472 B payloads over IPv4) on a [`Trace`]'s schedule.
//! - **ICMP** echo requests from outside and replies from inside, and **ARP** requests both ways.
//!
//! Every frame is valid (checksums right), every payload a function of its flow and position, so
//! a ledger can check each output byte ([`super::tally`]).

use std::ops::Range;

use pxio::checksum::{pseudo_header_v4, pseudo_header_v6, Sum};

use crate::trace::{Layout, Trace, TraceConfig};
use crate::BenchError;

/// Ethernet header.
pub const ETH_LEN: usize = 14;
/// TCP header with NOP, NOP, time stamps (what Linux sends on an established connection).
pub const TCP_LEN: usize = 32;
/// The external MTU.
pub const EMTU: usize = 1500;
/// Most frames one RX burst of the bench carries (the trace's 32, plus what else arrived meanwhile
/// in the mix).
pub const RX_MAX: usize = 128;
/// RX burst size of the frames the bench schedules itself (ACKs, the inside's packets).
const RX_BURST: usize = 32;
/// The outside peer's round trip, from a segment leaving the gateway to its ACK arriving.
pub const PEER_RTT_NS: u64 = 50_000;
/// The inside host's answer time, from data arriving at the gateway to its ACK arriving back.
pub const INSIDE_RTT_NS: u64 = 20_000;
/// Segments of one outbound TSO burst (7 x 8,948 B: 62.6 KB).
const OUT_SEGMENTS_PER_BURST: u32 = 7;
/// Period of the payload patterns (prime, as the trace's).
const PATTERN_PERIOD: usize = 251;
/// The caravan-eligible UDP port on the outside.
const UDP_PEER_PORT: u16 = 443;
/// The outbound peers' TCP port.
const TCP_PEER_PORT: u16 = 443;
/// ICMP echo identifier.
const ICMP_ID: u16 = 0x1234;
/// ICMP echo payload bytes.
const ICMP_PAYLOAD: usize = 56;
/// ARP frames are padded to Ethernet's minimum (without FCS).
const ARP_FRAME: usize = 60;
const TTL: u8 = 57;
const WINDOW: u16 = 1024;

/// MACs: the outside router, the gateway, the inside router.
const OUTSIDE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const GATEWAY_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const INSIDE_MAC: [u8; 6] = [2, 0, 0, 0, 0, 3];

/// The trace's inbound receiver (its `10.0.0.2:5201`, `2001:db8::2`).
const TRACE_DST_PORT: u16 = 5201;

/// One frame of a scenario, as a compact record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Slot of the inbound TCP trace (from outside).
    Trace(u32),
    /// Outbound TCP segment `seg` of outbound flow `flow` (from inside).
    OutData {
        /// Outbound flow.
        flow: u32,
        /// Segment number in the flow's stream.
        seg: u32,
    },
    /// The outside peer's ACK of outbound flow `flow`, acknowledging `acked` stream bytes.
    AckOut {
        /// Outbound flow.
        flow: u32,
        /// Stream bytes acknowledged.
        acked: u32,
    },
    /// The inside host's ACK of inbound (trace) flow `flow`, acknowledging `acked` bytes.
    AckIn {
        /// Trace flow.
        flow: u32,
        /// Stream bytes acknowledged.
        acked: u32,
    },
    /// UDP datagram `seq` of UDP flow `flow` (from outside).
    Udp {
        /// UDP flow.
        flow: u32,
        /// Datagram number in the flow.
        seq: u32,
    },
    /// ICMP echo request from outside (`outside`) or reply from inside, number `n`.
    Icmp {
        /// From the outside port.
        outside: bool,
        /// Echo sequence number.
        n: u16,
    },
    /// ARP request from outside (`outside`) or inside, number `n`.
    Arp {
        /// From the outside port.
        outside: bool,
        /// Request number.
        n: u32,
    },
}

/// One RX burst of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RxBurst {
    /// Received on the outside port (else the inside one).
    pub outside: bool,
    /// Simulated time the gateway receives it.
    pub time_ns: u64,
    /// Its frames, indexes into [`Workload::frames`].
    pub frames: Range<usize>,
}

/// What the trace flows look like, read from their first segment: what the handshakes and the
/// inside's ACKs need.
#[derive(Clone, Copy, Debug)]
struct TraceFlow {
    src: [u8; 16],
    sport: u16,
    /// Sequence number of the first data byte.
    isn: u32,
    /// The inside host's sequence number (what the outside acknowledges).
    ack: u32,
}

/// The mix's make-up, as shares of its frames.
pub mod mix {
    /// Inbound TCP data (the trace).
    pub const INBOUND_TCP: f64 = 0.60;
    /// Outbound TCP segments (each answered by about three ACKs from outside).
    pub const OUTBOUND_TCP: f64 = 0.05;
    /// Inbound UDP datagrams.
    pub const UDP: f64 = 0.10;
    /// ICMP echo requests and replies, each.
    pub const ICMP: f64 = 0.002;
    /// ARP requests from each side.
    pub const ARP: f64 = 0.001;
}

/// The scenarios' kinds of traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Inbound TCP, the merge bench's poisson-tso trace.
    InboundTcp,
    /// Outbound iMTU-sized TCP segments, and the outside's ACKs.
    OutboundTcp,
    /// Inbound UDP, packed into caravans.
    InboundUdp,
    /// TCP both ways, 10 % UDP, a little ICMP and ARP.
    Mix,
}

impl Kind {
    /// Every kind, in report order.
    pub const ALL: [Kind; 4] = [
        Kind::InboundTcp,
        Kind::OutboundTcp,
        Kind::InboundUdp,
        Kind::Mix,
    ];

    /// The name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::InboundTcp => "inbound-tcp",
            Kind::OutboundTcp => "outbound-tcp",
            Kind::InboundUdp => "inbound-udp",
            Kind::Mix => "mix",
        }
    }

    /// Whether the scenario has inbound TCP data for the merge engine (and the trace's ledger).
    pub fn has_trace(self) -> bool {
        matches!(self, Kind::InboundTcp | Kind::Mix)
    }
}

/// What a scenario sends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkloadSpec {
    /// The kind of traffic.
    pub kind: Kind,
    /// Flows of the scenario's main traffic (the mix has a quarter as many outbound flows and a
    /// tenth as many UDP flows).
    pub flows: u32,
    /// Each flow's rate, Gb/s.
    pub gbps_per_flow: f64,
    /// IPv6 instead of IPv4.
    pub v6: bool,
    /// About this many frames in all.
    pub packets: u64,
    /// Trace generator seed.
    pub seed: u64,
    /// The iMTU (the inside hosts' segments fill it).
    pub imtu: usize,
}

/// A scenario's frames, bursts and handshakes, and how to write each frame.
pub struct Workload {
    /// What was asked for.
    pub spec: WorkloadSpec,
    /// The inbound TCP trace, when the scenario has one.
    pub trace: Option<Trace>,
    /// Every frame, in the order of the bursts.
    pub frames: Vec<Frame>,
    /// The RX bursts, in time order.
    pub bursts: Vec<RxBurst>,
    /// The handshakes, played untimed before the bursts: rounds of (from outside, frame).
    pub handshakes: Vec<Vec<(bool, Vec<u8>)>>,
    /// Outbound flows, and the stream bytes each sends.
    pub out_stream_bytes: Vec<u64>,
    /// UDP flows.
    pub udp_flows: u32,
    trace_flows: Vec<Option<TraceFlow>>,
    pattern: Vec<u8>,
    toeplitz: pxio::toeplitz::Toeplitz,
}

impl Workload {
    /// Generates the scenario `spec` describes.
    pub fn generate(spec: WorkloadSpec) -> Result<Self, BenchError> {
        let mut w = Workload {
            spec,
            trace: None,
            frames: Vec::new(),
            bursts: Vec::new(),
            handshakes: Vec::new(),
            out_stream_bytes: Vec::new(),
            udp_flows: 0,
            trace_flows: Vec::new(),
            pattern: (0..PATTERN_PERIOD + 9216)
                .map(|k| (k % PATTERN_PERIOD) as u8)
                .collect(),
            toeplitz: pxio::toeplitz::Toeplitz::default(),
        };
        let n = spec.packets.max(64) as f64;
        // Inbound events (time, frame) besides the trace's, and the inside's (time, frame).
        let mut extra_in: Vec<(u64, Frame)> = Vec::new();
        let mut from_inside: Vec<(u64, Frame)> = Vec::new();
        let mut out_flows = 0u32;
        match spec.kind {
            Kind::InboundTcp => {
                w.trace = Some(Trace::generate(w.trace_config(spec.flows, n as u64))?);
            }
            Kind::OutboundTcp => {
                // About three ACKs per segment: a quarter of the frames are segments.
                out_flows = spec.flows;
                let cfg = w.outbound_config(out_flows, spec.gbps_per_flow, (n / 4.0) as u64);
                w.outbound(cfg, &mut from_inside, &mut extra_in)?;
            }
            Kind::InboundUdp => {
                w.udp_flows = spec.flows;
                let udp = Trace::generate(TraceConfig {
                    ipv6: spec.v6,
                    seed: spec.seed ^ 0x55,
                    min_packets: n as u64,
                    ..TraceConfig::new(spec.flows, spec.gbps_per_flow)
                })?;
                for (t, flow, seg) in schedule(&udp) {
                    extra_in.push((t, Frame::Udp { flow, seq: seg }));
                }
            }
            Kind::Mix => {
                let trace =
                    Trace::generate(w.trace_config(spec.flows, (n * mix::INBOUND_TCP) as u64))?;
                let span = trace.end_ns().max(1);
                w.trace = Some(trace);
                out_flows = (spec.flows / 4).max(1);
                let count = (n * mix::OUTBOUND_TCP) as u64;
                let cfg = w.outbound_config_over(out_flows, count, span);
                w.outbound(cfg, &mut from_inside, &mut extra_in)?;
                w.udp_flows = (spec.flows / 10).max(1);
                let count = (n * mix::UDP) as u64;
                let udp = Trace::generate(rate_over(
                    TraceConfig {
                        ipv6: spec.v6,
                        seed: spec.seed ^ 0x55,
                        ..TraceConfig::new(w.udp_flows, 1.0)
                    },
                    count,
                    span,
                ))?;
                for (t, flow, seg) in schedule(&udp) {
                    extra_in.push((t, Frame::Udp { flow, seq: seg }));
                }
                w.inside_acks(&mut from_inside);
                let every = |share: f64| (span as f64 / (n * share).max(1.0)) as u64;
                let (icmp, arp) = (every(mix::ICMP), every(mix::ARP));
                for k in 0..(n * mix::ICMP) as u64 {
                    let n = k as u16;
                    extra_in.push((k * icmp + icmp / 2, Frame::Icmp { outside: true, n }));
                    from_inside.push((
                        k * icmp + icmp / 2 + 1000,
                        Frame::Icmp { outside: false, n },
                    ));
                }
                for k in 0..(n * mix::ARP) as u64 {
                    let n = k as u32;
                    extra_in.push((k * arp + arp / 3, Frame::Arp { outside: true, n }));
                    from_inside.push((k * arp + 2 * arp / 3, Frame::Arp { outside: false, n }));
                }
            }
        }
        w.out_stream_bytes.resize(out_flows as usize, 0);
        if let Some(trace) = &w.trace {
            w.trace_flows = (0..trace.config().flows)
                .map(|f| {
                    let slot = trace.slot_of(f, 0)?;
                    let frame = trace.frame(slot);
                    let l = trace.layout();
                    let mut src = [0u8; 16];
                    let (at, len) = if l.v6 {
                        (ETH_LEN + 8, 16)
                    } else {
                        (ETH_LEN + 12, 4)
                    };
                    src[..len].copy_from_slice(&frame[at..at + len]);
                    Some(TraceFlow {
                        src,
                        sport: be16(&frame, l.tcp),
                        isn: be32(&frame, l.tcp_seq()),
                        ack: be32(&frame, l.tcp + 8),
                    })
                })
                .collect();
        }
        for f in &from_inside {
            if let Frame::OutData { flow, seg } = f.1 {
                let end = (u64::from(seg) + 1) * w.big_mss() as u64;
                let total = &mut w.out_stream_bytes[flow as usize];
                *total = (*total).max(end);
            }
        }
        w.handshakes = w.handshake_rounds(out_flows);
        w.build_bursts(extra_in, from_inside);
        Ok(w)
    }

    /// The inbound trace's configuration for `flows` flows and at least `packets` packets.
    fn trace_config(&self, flows: u32, packets: u64) -> TraceConfig {
        TraceConfig {
            ipv6: self.spec.v6,
            seed: self.spec.seed,
            min_packets: packets,
            ..TraceConfig::new(flows, self.spec.gbps_per_flow)
        }
    }

    /// A schedule for outbound flows of `gbps` each: a trace whose slots stand for 8,948 B
    /// segments (7 per TSO burst, spaced as 9,014 B frames at 100 Gb/s).
    fn outbound_config(&self, flows: u32, gbps: f64, packets: u64) -> TraceConfig {
        let mss = self.small_mss() as f64;
        TraceConfig {
            ipv6: self.spec.v6,
            seed: self.spec.seed ^ 0xa7,
            min_packets: packets,
            tso_bytes: OUT_SEGMENTS_PER_BURST * self.small_mss() as u32,
            // The trace spaces 1,514 B frames; these are 9,014 B.
            link_gbps: 100.0 * 1514.0 / (ETH_LEN + self.spec.imtu) as f64,
            // The trace counts 1,448 B per slot; each carries a whole big segment.
            ..TraceConfig::new(flows, gbps * mss / self.big_mss() as f64)
        }
    }

    /// [`outbound_config`](Self::outbound_config) with the rate that gives `count` segments over
    /// `span_ns`.
    fn outbound_config_over(&self, flows: u32, count: u64, span_ns: u64) -> TraceConfig {
        rate_over(self.outbound_config(flows, 1.0, count), count, span_ns)
    }

    /// Outbound segments on `cfg`'s schedule (from inside) and the outside's ACKs for them.
    fn outbound(
        &mut self,
        cfg: TraceConfig,
        from_inside: &mut Vec<(u64, Frame)>,
        from_outside: &mut Vec<(u64, Frame)>,
    ) -> Result<(), BenchError> {
        let sched = schedule(&Trace::generate(cfg)?);
        let big = self.big_mss() as u64;
        // The peer acknowledges every second full piece, cumulatively.
        let every = 2 * self.small_mss() as u64;
        let flows = sched.iter().map(|e| e.1 + 1).max().unwrap_or(0) as usize;
        let mut received: Vec<Vec<bool>> = vec![Vec::new(); flows];
        let mut frontier = vec![0u64; flows];
        let mut acked = vec![0u64; flows];
        for &(t, flow, seg) in &sched {
            from_inside.push((t, Frame::OutData { flow, seg }));
            let f = flow as usize;
            let got = &mut received[f];
            if got.len() <= seg as usize {
                got.resize(seg as usize + 1, false);
            }
            got[seg as usize] = true;
            while (frontier[f] as usize) < got.len() && got[frontier[f] as usize] {
                frontier[f] += 1;
            }
            let upto = frontier[f] * big;
            while acked[f] + every <= upto {
                acked[f] += every;
                let acked = u32::try_from(acked[f]).unwrap_or(u32::MAX);
                from_outside.push((t + PEER_RTT_NS, Frame::AckOut { flow, acked }));
            }
        }
        // The last ACK of each flow covers its odd piece.
        let last = sched.iter().map(|e| e.0).max().unwrap_or(0);
        for f in 0..flows {
            let upto = frontier[f] * big;
            if upto > acked[f] {
                let acked = u32::try_from(upto).unwrap_or(u32::MAX);
                from_outside.push((
                    last + PEER_RTT_NS,
                    Frame::AckOut {
                        flow: f as u32,
                        acked,
                    },
                ));
            }
        }
        Ok(())
    }

    /// The inside host's ACKs for the inbound trace: one per two merged segments.
    fn inside_acks(&self, from_inside: &mut Vec<(u64, Frame)>) {
        let Some(trace) = &self.trace else { return };
        let mss = trace.layout().mss as u64;
        let every = 2 * self.big_mss() as u64;
        let flows = trace.config().flows as usize;
        let mut received: Vec<Vec<bool>> = vec![Vec::new(); flows];
        let mut frontier = vec![0u64; flows];
        let mut acked = vec![0u64; flows];
        for (t, flow, seg) in schedule(trace) {
            let f = flow as usize;
            let got = &mut received[f];
            if got.len() <= seg as usize {
                got.resize(seg as usize + 1, false);
            }
            got[seg as usize] = true;
            while (frontier[f] as usize) < got.len() && got[frontier[f] as usize] {
                frontier[f] += 1;
            }
            while acked[f] + every <= frontier[f] * mss {
                acked[f] += every;
                let acked = u32::try_from(acked[f]).unwrap_or(u32::MAX);
                from_inside.push((t + INSIDE_RTT_NS, Frame::AckIn { flow, acked }));
            }
        }
    }

    /// The inbound bursts (the trace's, each joined by what else arrived before it ended) and
    /// the inside's (cut every 32 frames), merged in time order.
    fn build_bursts(
        &mut self,
        mut extra_in: Vec<(u64, Frame)>,
        mut from_inside: Vec<(u64, Frame)>,
    ) {
        extra_in.sort_by_key(|e| e.0);
        from_inside.sort_by_key(|e| e.0);
        let mut inbound: Vec<(u64, Vec<Frame>)> = Vec::new();
        let mut extra = extra_in.into_iter().peekable();
        if let Some(trace) = &self.trace {
            for b in trace.bursts() {
                // The trace's own slots keep their delivery time (its ledger dates them).
                let mut frames: Vec<(u64, Frame)> = b
                    .slots
                    .clone()
                    .map(|s| (trace.arrival_ns(s), Frame::Trace(s as u32)))
                    .collect();
                while let Some(e) = extra.next_if(|e| e.0 <= b.time_ns) {
                    frames.push(e);
                }
                frames.sort_by_key(|e| e.0);
                for chunk in frames.chunks(RX_MAX) {
                    inbound.push((b.time_ns, chunk.iter().map(|e| e.1).collect()));
                }
            }
        }
        let rest: Vec<(u64, Frame)> = extra.collect();
        for chunk in rest.chunks(RX_BURST) {
            let time = chunk.last().map_or(0, |e| e.0);
            inbound.push((time, chunk.iter().map(|e| e.1).collect()));
        }
        let outbound: Vec<(u64, Vec<Frame>)> = from_inside
            .chunks(RX_BURST)
            .map(|c| (c.last().map_or(0, |e| e.0), c.iter().map(|e| e.1).collect()))
            .collect();
        let mut all: Vec<(u64, bool, Vec<Frame>)> = inbound
            .into_iter()
            .map(|(t, f)| (t, true, f))
            .chain(outbound.into_iter().map(|(t, f)| (t, false, f)))
            .collect();
        // Stable: at equal times the outside port is read first, as the worker does.
        all.sort_by_key(|b| (b.0, !b.1));
        for (time_ns, outside, frames) in all {
            let start = self.frames.len();
            self.frames.extend(frames);
            self.bursts.push(RxBurst {
                outside,
                time_ns,
                frames: start..self.frames.len(),
            });
        }
    }

    /// The three rounds of handshakes: every connection's SYN, then every SYN-ACK, then every
    /// ACK; trace flows from outside, outbound flows from inside.
    fn handshake_rounds(&self, out_flows: u32) -> Vec<Vec<(bool, Vec<u8>)>> {
        let mut rounds = vec![Vec::new(), Vec::new(), Vec::new()];
        let v6 = self.spec.v6;
        let outside_mss = (EMTU - l3_len(v6) - 20) as u16;
        let inside_mss = (self.spec.imtu - l3_len(v6) - 20) as u16;
        for tf in self.trace_flows.iter().flatten() {
            let (o, i) = (tf.src, self.inside_host(2));
            let (sp, dp) = (tf.sport, TRACE_DST_PORT);
            rounds[0].push((
                true,
                self.tcp_frame(
                    true,
                    o,
                    i,
                    sp,
                    dp,
                    tf.isn.wrapping_sub(1),
                    0,
                    SYN,
                    Some(outside_mss),
                    &[],
                ),
            ));
            rounds[1].push((
                false,
                self.tcp_frame(
                    false,
                    i,
                    o,
                    dp,
                    sp,
                    tf.ack.wrapping_sub(1),
                    tf.isn,
                    SYN | ACK,
                    Some(inside_mss),
                    &[],
                ),
            ));
            rounds[2].push((
                true,
                self.tcp_frame(true, o, i, sp, dp, tf.isn, tf.ack, ACK, None, &[]),
            ));
        }
        for f in 0..out_flows {
            let (i, o) = (self.inside_host(3), self.out_peer(f));
            let (sp, dp) = (out_port(f), TCP_PEER_PORT);
            let (isn, peer) = (out_isn(f), peer_isn(f));
            rounds[0].push((
                false,
                self.tcp_frame(
                    false,
                    i,
                    o,
                    sp,
                    dp,
                    isn.wrapping_sub(1),
                    0,
                    SYN,
                    Some(inside_mss),
                    &[],
                ),
            ));
            rounds[1].push((
                true,
                self.tcp_frame(
                    true,
                    o,
                    i,
                    dp,
                    sp,
                    peer,
                    isn,
                    SYN | ACK,
                    Some(outside_mss),
                    &[],
                ),
            ));
            rounds[2].push((
                false,
                self.tcp_frame(
                    false,
                    i,
                    o,
                    sp,
                    dp,
                    isn,
                    peer.wrapping_add(1),
                    ACK,
                    None,
                    &[],
                ),
            ));
        }
        rounds.retain(|r| !r.is_empty());
        rounds
    }

    /// TCP payload of an inside host's segment: the iMTU less IP and TCP with time stamps.
    pub fn big_mss(&self) -> usize {
        self.spec.imtu - l3_len(self.spec.v6) - TCP_LEN
    }

    /// TCP payload of a full 1,500 B segment with time stamps.
    pub fn small_mss(&self) -> usize {
        EMTU - l3_len(self.spec.v6) - TCP_LEN
    }

    /// UDP payload of a datagram (a 1,514 B frame).
    pub fn udp_payload(&self) -> usize {
        1514 - ETH_LEN - l3_len(self.spec.v6) - 8
    }

    /// The longest frame the scenario has.
    pub fn max_frame(&self) -> usize {
        if self.out_stream_bytes.is_empty() {
            1514
        } else {
            ETH_LEN + self.spec.imtu
        }
    }

    /// Frames in all.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether there is no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frames of each kind: (inbound TCP data, outbound TCP data, ACKs, UDP, ICMP and ARP).
    pub fn census(&self) -> [u64; 5] {
        let mut c = [0u64; 5];
        for f in &self.frames {
            let i = match f {
                Frame::Trace(_) => 0,
                Frame::OutData { .. } => 1,
                Frame::AckOut { .. } | Frame::AckIn { .. } => 2,
                Frame::Udp { .. } => 3,
                Frame::Icmp { .. } | Frame::Arp { .. } => 4,
            };
            c[i] += 1;
        }
        c
    }

    /// Simulated time of the last burst.
    pub fn end_ns(&self) -> u64 {
        self.bursts.iter().map(|b| b.time_ns).max().unwrap_or(0)
    }

    /// Whether `frame` comes from the outside port.
    pub fn from_outside(frame: &Frame) -> bool {
        match *frame {
            Frame::Trace(_) | Frame::AckOut { .. } | Frame::Udp { .. } => true,
            Frame::OutData { .. } | Frame::AckIn { .. } => false,
            Frame::Icmp { outside, .. } | Frame::Arp { outside, .. } => outside,
        }
    }

    /// Length of `frame`'s bytes.
    pub fn frame_len(&self, frame: &Frame) -> usize {
        let v6 = self.spec.v6;
        match *frame {
            Frame::Trace(_) => crate::trace::layout::FRAME_LEN,
            Frame::OutData { .. } => ETH_LEN + self.spec.imtu,
            Frame::AckOut { .. } | Frame::AckIn { .. } => ETH_LEN + l3_len(v6) + TCP_LEN,
            Frame::Udp { .. } => 1514,
            Frame::Icmp { .. } => ETH_LEN + l3_len(v6) + 8 + ICMP_PAYLOAD,
            Frame::Arp { .. } => ARP_FRAME,
        }
    }

    /// Writes `frame` into `out` (at least [`frame_len`](Self::frame_len) long) and returns
    /// its length.
    pub fn write(&self, frame: &Frame, out: &mut [u8]) -> usize {
        let len = self.frame_len(frame);
        let out = &mut out[..len];
        match *frame {
            Frame::Trace(slot) => {
                let trace = self.trace.as_ref().expect("trace frames come with a trace");
                trace.write_frame(slot as usize, out);
            }
            Frame::OutData { flow, seg } => {
                let mss = self.big_mss();
                let offset = seg as usize * mss;
                let seq = out_isn(flow).wrapping_add(offset as u32);
                let ack = peer_isn(flow).wrapping_add(1);
                let (i, o) = (self.inside_host(3), self.out_peer(flow));
                let tsval = seg / OUT_SEGMENTS_PER_BURST;
                self.tcp_into(
                    out,
                    false,
                    i,
                    o,
                    (out_port(flow), TCP_PEER_PORT),
                    (seq, ack, tsval),
                    ACK,
                    None,
                    |p| self.fill_stream(p, out_salt(flow), offset),
                );
            }
            Frame::AckOut { flow, acked } => {
                let (i, o) = (self.inside_host(3), self.out_peer(flow));
                let seq = peer_isn(flow).wrapping_add(1);
                let ack = out_isn(flow).wrapping_add(acked);
                self.tcp_into(
                    out,
                    true,
                    o,
                    i,
                    (TCP_PEER_PORT, out_port(flow)),
                    (seq, ack, acked >> 16),
                    ACK,
                    None,
                    |_| {},
                );
            }
            Frame::AckIn { flow, acked } => {
                let tf = self.trace_flows[flow as usize].expect("an ACK of a flow that sent");
                let i = self.inside_host(2);
                let ack = tf.isn.wrapping_add(acked);
                self.tcp_into(
                    out,
                    false,
                    i,
                    tf.src,
                    (TRACE_DST_PORT, tf.sport),
                    (tf.ack, ack, acked >> 16),
                    ACK,
                    None,
                    |_| {},
                );
            }
            Frame::Udp { flow, seq } => {
                let (o, i) = (self.udp_peer(flow), self.inside_host(4));
                let payload = self.udp_payload();
                let l4 = self.ip_into(out, true, o, i, 17, 8 + payload);
                let (sport, dport) = (UDP_PEER_PORT, udp_port(flow));
                out[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
                out[l4 + 2..l4 + 4].copy_from_slice(&dport.to_be_bytes());
                out[l4 + 4..l4 + 6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
                let p = &mut out[l4 + 8..];
                p[..4].copy_from_slice(&flow.to_be_bytes());
                p[4..8].copy_from_slice(&seq.to_be_bytes());
                self.fill_stream(&mut p[8..], udp_salt(flow), seq as usize * 13);
                self.l4_checksum(out, l4, 17, 6);
            }
            Frame::Icmp { outside, n } => {
                let (peer, host) = (self.icmp_peer(), self.inside_host(5));
                let (src, dst) = if outside { (peer, host) } else { (host, peer) };
                let v6 = self.spec.v6;
                let proto = if v6 { 58 } else { 1 };
                let l4 = self.ip_into(out, outside, src, dst, proto, 8 + ICMP_PAYLOAD);
                out[l4] = match (v6, outside) {
                    (false, true) => 8,
                    (false, false) => 0,
                    (true, true) => 128,
                    (true, false) => 129,
                };
                out[l4 + 1] = 0;
                out[l4 + 4..l4 + 6].copy_from_slice(&ICMP_ID.to_be_bytes());
                out[l4 + 6..l4 + 8].copy_from_slice(&n.to_be_bytes());
                for (k, b) in out[l4 + 8..].iter_mut().enumerate() {
                    *b = k as u8;
                }
                if v6 {
                    self.l4_checksum(out, l4, 58, 2);
                } else {
                    out[l4 + 2..l4 + 4].fill(0);
                    let sum = Sum::of(&out[l4..]).checksum();
                    out[l4 + 2..l4 + 4].copy_from_slice(&sum.to_be_bytes());
                }
            }
            Frame::Arp { outside, n } => {
                out.fill(0);
                out[..6].fill(0xff);
                out[6..12].copy_from_slice(if outside { &OUTSIDE_MAC } else { &INSIDE_MAC });
                out[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
                let a = &mut out[ETH_LEN..];
                a[..8].copy_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
                // The sender's MAC carries the request's number; addresses tell the side.
                a[8..10].copy_from_slice(&[2, u8::from(outside)]);
                a[10..14].copy_from_slice(&n.to_be_bytes());
                a[14..18].copy_from_slice(if outside {
                    &[198, 19, 255, 253]
                } else {
                    &[10, 0, 0, 6]
                });
                a[24..28].copy_from_slice(if outside {
                    &[198, 19, 255, 1]
                } else {
                    &[10, 0, 0, 1]
                });
            }
        }
        len
    }

    /// The RSS hash a NIC reports for `frame`: Toeplitz (the gateway's symmetric key) over its
    /// 5-tuple, over its addresses for ICMP, none for ARP.
    pub fn rss_hash(&self, frame: &Frame, bytes: &[u8]) -> Option<u32> {
        if let Frame::Trace(slot) = frame {
            return self.trace.as_ref().map(|t| t.rss_hash(*slot as usize));
        }
        let key = tuple_of(bytes)?;
        let t = &self.toeplitz;
        Some(if key.v6 {
            t.hash_v6(key.src, key.dst, key.sport, key.dport)
        } else {
            let v4 = |a: [u8; 16]| [a[0], a[1], a[2], a[3]];
            t.hash_v4(v4(key.src), v4(key.dst), key.sport, key.dport)
        })
    }

    // ---- addresses ----

    /// Inside host `n` (`10.0.0.n`, `2001:db8::n`).
    fn inside_host(&self, n: u8) -> [u8; 16] {
        if self.spec.v6 {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            a[15] = n;
            a
        } else {
            v4([10, 0, 0, n])
        }
    }

    /// An outside address `198.19.0.0 + offset` (IPv6: `2001:2::` and those four bytes, as the
    /// trace writes its sources).
    fn outside(&self, offset: u32) -> [u8; 16] {
        let a = (u32::from_be_bytes([198, 19, 0, 0]) + offset).to_be_bytes();
        if self.spec.v6 {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&[0x20, 0x01, 0, 2]);
            b[12..].copy_from_slice(&a);
            b
        } else {
            v4(a)
        }
    }

    /// Outbound flow `f`'s outside peer.
    fn out_peer(&self, f: u32) -> [u8; 16] {
        self.outside(f)
    }

    /// UDP flow `f`'s outside sender.
    fn udp_peer(&self, f: u32) -> [u8; 16] {
        self.outside(0x8000 + f)
    }

    /// The outside host that pings.
    fn icmp_peer(&self) -> [u8; 16] {
        self.outside(0xfffe)
    }

    /// The (kind, flow) of every 4-tuple the scenario's generated TCP and UDP traffic uses
    /// (not the trace's data, which its own ledger reads).
    pub fn tuples(&self) -> Vec<(Tuple, TupleKind, u32)> {
        let mut v = Vec::new();
        let t = |src, dst, sport, dport| Tuple {
            v6: self.spec.v6,
            src,
            dst,
            sport,
            dport,
        };
        for f in 0..self.out_stream_bytes.len() as u32 {
            let (i, o, sp) = (self.inside_host(3), self.out_peer(f), out_port(f));
            v.push((t(i, o, sp, TCP_PEER_PORT), TupleKind::OutData, f));
            v.push((t(o, i, TCP_PEER_PORT, sp), TupleKind::AckOut, f));
        }
        for (f, tf) in self.trace_flows.iter().enumerate() {
            if let Some(tf) = tf {
                let i = self.inside_host(2);
                v.push((
                    t(i, tf.src, TRACE_DST_PORT, tf.sport),
                    TupleKind::AckIn,
                    f as u32,
                ));
            }
        }
        for f in 0..self.udp_flows {
            let (o, i) = (self.udp_peer(f), self.inside_host(4));
            v.push((t(o, i, UDP_PEER_PORT, udp_port(f)), TupleKind::Udp, f));
        }
        v
    }

    /// The inbound trace flows' first data sequence numbers (what the inside's ACKs count
    /// from), by flow.
    pub fn ack_bases(&self) -> Vec<u32> {
        self.trace_flows
            .iter()
            .map(|t| t.map_or(0, |t| t.isn))
            .collect()
    }

    /// The first stream byte's sequence number of outbound flow `flow`.
    pub fn out_isn(&self, flow: u32) -> u32 {
        out_isn(flow)
    }

    /// Whether `bytes` are outbound flow `flow`'s stream from `offset` on.
    pub fn out_payload_matches(&self, flow: u32, offset: usize, bytes: &[u8]) -> bool {
        self.pattern_matches(bytes, offset as u64, out_salt(flow))
    }

    /// The salt of each inbound trace flow's payload, when the trace's streams follow the
    /// pattern this module writes (`(offset mod 251) ^ salt`, the salt being the stream's first
    /// byte), checked against the trace's own `payload_matches` on every flow's first segment;
    /// `None` when they do not (then the trace's ledger compares bytes itself, slower).
    pub fn trace_salts(&self) -> Option<Vec<u8>> {
        let trace = self.trace.as_ref()?;
        let l = trace.layout();
        let mut frame = vec![0u8; crate::trace::layout::FRAME_LEN];
        let mut expect = vec![0u8; l.mss];
        (0..trace.config().flows)
            .map(|f| {
                let Some(slot) = trace.slot_of(f, 0) else {
                    return Some(0); // a flow that sent nothing is never looked up
                };
                trace.write_frame(slot, &mut frame);
                let salt = frame[l.headers_len];
                self.fill_stream(&mut expect, salt, 0);
                trace.payload_matches(f, 0, 0, &expect).then_some(salt)
            })
            .collect()
    }

    /// Whether `bytes` are the pattern salted with `salt` from stream offset `offset` on.
    pub fn pattern_matches(&self, bytes: &[u8], offset: u64, salt: u8) -> bool {
        let mut at = (offset % PATTERN_PERIOD as u64) as usize;
        for chunk in bytes.chunks(PATTERN_PERIOD) {
            let want = &self.pattern[at..at + chunk.len()];
            // No early exit: the loop vectorises.
            let diff = chunk
                .iter()
                .zip(want)
                .fold(0u8, |d, (&b, &p)| d | (b ^ salt ^ p));
            if diff != 0 {
                return false;
            }
            at = (at + chunk.len()) % PATTERN_PERIOD;
        }
        true
    }

    // ---- writing ----

    fn fill_stream(&self, out: &mut [u8], salt: u8, offset: usize) {
        let start = offset % PATTERN_PERIOD;
        let n = out.len();
        for (d, s) in out.iter_mut().zip(&self.pattern[start..start + n]) {
            *d = s ^ salt;
        }
    }

    /// Ethernet and IP headers for an L4 part of `l4_len` bytes; returns the L4 offset.
    fn ip_into(
        &self,
        out: &mut [u8],
        outside: bool,
        src: [u8; 16],
        dst: [u8; 16],
        proto: u8,
        l4_len: usize,
    ) -> usize {
        let v6 = self.spec.v6;
        out[..6].copy_from_slice(&GATEWAY_MAC);
        out[6..12].copy_from_slice(if outside { &OUTSIDE_MAC } else { &INSIDE_MAC });
        let ip = &mut out[ETH_LEN..];
        if v6 {
            out[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let ip = &mut out[ETH_LEN..];
            ip[..4].copy_from_slice(&[0x60, 0, 0, 0]);
            ip[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            ip[6] = proto;
            ip[7] = TTL;
            ip[8..24].copy_from_slice(&src);
            ip[24..40].copy_from_slice(&dst);
        } else {
            ip[..20].fill(0);
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + l4_len) as u16).to_be_bytes());
            // DF on TCP and UDP; the ID from the addresses' low bytes and the length.
            ip[4..6].copy_from_slice(&u16::from_be_bytes([src[3], dst[3]]).to_be_bytes());
            ip[6] = 0x40;
            ip[8] = TTL;
            ip[9] = proto;
            ip[12..16].copy_from_slice(&src[..4]);
            ip[16..20].copy_from_slice(&dst[..4]);
            let sum = Sum::of(&ip[..20]).checksum();
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            out[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        }
        ETH_LEN + l3_len(v6)
    }

    /// Writes the L4 checksum (at `l4 + at`) of the L4 part starting at `l4`.
    fn l4_checksum(&self, out: &mut [u8], l4: usize, proto: u8, at: usize) {
        out[l4 + at..l4 + at + 2].fill(0);
        let l4_len = out.len() - l4;
        let pseudo = pseudo(self.spec.v6, out, proto, l4_len);
        let sum = pseudo.add(Sum::of(&out[l4..])).checksum();
        // UDP sends a computed 0 as 0xffff (0 means "no checksum").
        let sum = if proto == 17 && sum == 0 { 0xffff } else { sum };
        out[l4 + at..l4 + at + 2].copy_from_slice(&sum.to_be_bytes());
    }

    /// A TCP frame into `out` (its length is the frame's): headers, options (the MSS on a SYN;
    /// time stamps always), `payload` written by `fill`, checksums.
    #[allow(clippy::too_many_arguments)]
    fn tcp_into(
        &self,
        out: &mut [u8],
        outside: bool,
        src: [u8; 16],
        dst: [u8; 16],
        (sport, dport): (u16, u16),
        (seq, ack, tsval): (u32, u32, u32),
        flags: u8,
        mss: Option<u16>,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let opts = if mss.is_some() { 16 } else { 12 };
        let hl = 20 + opts;
        let l4_len = out.len() - ETH_LEN - l3_len(self.spec.v6);
        let l4 = self.ip_into(out, outside, src, dst, 6, l4_len);
        let t = &mut out[l4..];
        t[..hl].fill(0);
        t[..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = ((hl / 4) as u8) << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&(if flags & SYN != 0 { 64240 } else { WINDOW }).to_be_bytes());
        let mut o = 20;
        if let Some(mss) = mss {
            t[o..o + 4].copy_from_slice(&[2, 4, (mss >> 8) as u8, mss as u8]);
            o += 4;
        }
        t[o..o + 4].copy_from_slice(&[1, 1, 8, 10]);
        t[o + 4..o + 8].copy_from_slice(&tsval.to_be_bytes());
        t[o + 8..o + 12].copy_from_slice(&(tsval ^ 0x5a5a).to_be_bytes());
        fill(&mut t[hl..]);
        self.l4_checksum(out, l4, 6, 16);
    }

    /// A TCP frame without payload (handshakes), as bytes.
    #[allow(clippy::too_many_arguments)]
    fn tcp_frame(
        &self,
        outside: bool,
        src: [u8; 16],
        dst: [u8; 16],
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        mss: Option<u16>,
        payload: &[u8],
    ) -> Vec<u8> {
        let opts = if mss.is_some() { 16 } else { 12 };
        let mut v = vec![0u8; ETH_LEN + l3_len(self.spec.v6) + 20 + opts + payload.len()];
        self.tcp_into(
            &mut v,
            outside,
            src,
            dst,
            (sport, dport),
            (seq, ack, 1),
            flags,
            mss,
            |p| p.copy_from_slice(payload),
        );
        v
    }
}

/// What a 4-tuple of the generated traffic carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TupleKind {
    /// Outbound TCP data.
    OutData,
    /// The outside peer's ACKs of outbound data.
    AckOut,
    /// The inside host's ACKs of inbound (trace) data.
    AckIn,
    /// Inbound UDP.
    Udp,
}

/// A TCP or UDP 4-tuple (IPv4 addresses in the first four bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    /// IPv6.
    pub v6: bool,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// The 4-tuple of an Ethernet frame's TCP, UDP (ports) or ICMP (ports 0) packet.
pub fn tuple_of(frame: &[u8]) -> Option<Tuple> {
    let ip = parse_ip(frame)?;
    let ports = matches!(ip.proto, 6 | 17) && frame.len() >= ip.l4 + 4;
    Some(Tuple {
        v6: ip.v6,
        src: ip.src,
        dst: ip.dst,
        sport: if ports { be16(frame, ip.l4) } else { 0 },
        dport: if ports { be16(frame, ip.l4 + 2) } else { 0 },
    })
}

/// An IP packet's layout in an untagged Ethernet frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpInfo {
    /// IPv6.
    pub v6: bool,
    /// L4 protocol (IPv6: the first next header; the bench sends no extension headers).
    pub proto: u8,
    /// Source address (IPv4 in the first four bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Offset of the L4 header.
    pub l4: usize,
    /// The IP packet's length per its header.
    pub ip_len: usize,
    /// DSCP.
    pub dscp: u8,
}

/// [`IpInfo`] of an untagged Ethernet frame carrying IPv4 (no options beyond its IHL) or IPv6.
pub fn parse_ip(frame: &[u8]) -> Option<IpInfo> {
    if frame.len() < ETH_LEN + 20 {
        return None;
    }
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    match be16(frame, 12) {
        0x0800 => {
            let ip = &frame[ETH_LEN..];
            if ip[0] >> 4 != 4 {
                return None;
            }
            let ihl = usize::from(ip[0] & 15) * 4;
            src[..4].copy_from_slice(&ip[12..16]);
            dst[..4].copy_from_slice(&ip[16..20]);
            Some(IpInfo {
                v6: false,
                proto: ip[9],
                src,
                dst,
                l4: ETH_LEN + ihl,
                ip_len: usize::from(be16(ip, 2)),
                dscp: ip[1] >> 2,
            })
        }
        0x86dd if frame.len() >= ETH_LEN + 40 => {
            let ip = &frame[ETH_LEN..];
            src.copy_from_slice(&ip[8..24]);
            dst.copy_from_slice(&ip[24..40]);
            Some(IpInfo {
                v6: true,
                proto: ip[6],
                src,
                dst,
                l4: ETH_LEN + 40,
                ip_len: 40 + usize::from(be16(ip, 4)),
                dscp: ((u16::from(ip[0] & 15) << 2) | u16::from(ip[1] >> 6)) as u8,
            })
        }
        _ => None,
    }
}

/// The pseudo-header sum of the L4 part of `frame` (`l4_len` bytes of protocol `proto`).
pub fn pseudo(v6: bool, frame: &[u8], proto: u8, l4_len: usize) -> Sum {
    if v6 {
        let a = |at: usize| -> [u8; 16] { frame[at..at + 16].try_into().expect("16 bytes") };
        pseudo_header_v6(a(ETH_LEN + 8), a(ETH_LEN + 24), proto, l4_len as u32)
    } else {
        let a = |at: usize| -> [u8; 4] { frame[at..at + 4].try_into().expect("4 bytes") };
        pseudo_header_v4(a(ETH_LEN + 12), a(ETH_LEN + 16), proto, l4_len as u16)
    }
}

/// (time, flow, segment) of every slot of `trace`, in slot order.
pub fn schedule(trace: &Trace) -> Vec<(u64, u32, u32)> {
    let l: Layout = trace.layout();
    let mut buf = vec![0u8; crate::trace::layout::FRAME_LEN];
    (0..trace.len())
        .map(|slot| {
            trace.write_frame(slot, &mut buf);
            let src = be32(&buf, l.src_low32());
            let flow = trace
                .flow_of_source(src)
                .expect("a trace frame names its flow");
            let seg = trace
                .segment_of(flow, be32(&buf, l.tcp_seq()))
                .expect("a trace frame starts a segment");
            (trace.arrival_ns(slot), flow, seg)
        })
        .collect()
}

/// `cfg` with the rate per flow that makes `count` packets last `span_ns`.
fn rate_over(cfg: TraceConfig, count: u64, span_ns: u64) -> TraceConfig {
    let segs = f64::from(cfg.segments_per_burst().max(1));
    let pps_per_ns = count.max(1) as f64 / span_ns.max(1) as f64;
    let interval = f64::from(cfg.flows) * segs / pps_per_ns;
    TraceConfig {
        gbps_per_flow: f64::from(cfg.tso_bytes) * 8.0 / interval,
        min_packets: count.max(1),
        min_bursts_per_flow: 0.0,
        ..cfg
    }
}

/// TCP flags.
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

/// Network-layer header bytes.
pub fn l3_len(v6: bool) -> usize {
    if v6 {
        40
    } else {
        20
    }
}

fn v4(a: [u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&a);
    b
}

/// A 32-bit mix of a flow number and a purpose (SplitMix64's finaliser).
fn mix32(f: u32, what: u64) -> u32 {
    let mut z = (u64::from(f) << 8 | what).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

fn out_isn(f: u32) -> u32 {
    mix32(f, 1)
}

fn peer_isn(f: u32) -> u32 {
    mix32(f, 2)
}

fn out_salt(f: u32) -> u8 {
    mix32(f, 3) as u8
}

fn udp_salt(f: u32) -> u8 {
    mix32(f, 4) as u8
}

/// The inside host's port of outbound flow `f`.
fn out_port(f: u32) -> u16 {
    32768 + (f % 28000) as u16
}

/// The inside receiver's port of UDP flow `f`.
fn udp_port(f: u32) -> u16 {
    20000 + (f % 10000) as u16
}

/// Big-endian u16 at `at`.
pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Big-endian u32 at `at`.
pub fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: Kind, v6: bool) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            flows: 8,
            gbps_per_flow: 2.0,
            v6,
            packets: 4000,
            seed: 1,
            imtu: 9000,
        }
    }

    fn l4_ok(frame: &[u8]) -> bool {
        let ip = parse_ip(frame).unwrap();
        let len = ETH_LEN + ip.ip_len;
        let l4_len = len - ip.l4;
        let p = if ip.proto == 1 {
            Sum(0)
        } else {
            pseudo(ip.v6, frame, ip.proto, l4_len)
        };
        let ip_ok = ip.v6 || Sum::of(&frame[ETH_LEN..ip.l4]).fold() == 0xffff;
        ip_ok && p.add(Sum::of(&frame[ip.l4..len])).fold() == 0xffff && len == frame.len()
    }

    #[test]
    fn every_frame_is_valid_and_bursts_are_in_time_order() {
        for kind in Kind::ALL {
            for v6 in [false, true] {
                let w = Workload::generate(spec(kind, v6)).unwrap();
                assert!(w.len() >= 2000, "{kind:?} {v6}: {}", w.len());
                assert!(w.bursts.windows(2).all(|b| b[0].time_ns <= b[1].time_ns));
                assert!(w.bursts.iter().all(|b| b.frames.len() <= RX_MAX));
                let mut buf = vec![0u8; 9216];
                for (k, f) in w.frames.iter().enumerate().step_by(7) {
                    let n = w.write(f, &mut buf);
                    assert_eq!(n, w.frame_len(f));
                    if !matches!(f, Frame::Arp { .. }) {
                        assert!(l4_ok(&buf[..n]), "{kind:?} v6 {v6} frame {k}: {f:?}");
                    }
                }
                for b in &w.bursts {
                    for f in &w.frames[b.frames.clone()] {
                        assert_eq!(Workload::from_outside(f), b.outside, "{f:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn trace_payloads_are_checked_at_memory_speed_as_the_trace_checks_them() {
        for v6 in [false, true] {
            let w = Workload::generate(spec(Kind::InboundTcp, v6)).unwrap();
            let trace = w.trace.as_ref().unwrap();
            let salts = w.trace_salts().expect("the trace's pattern is known");
            let l = trace.layout();
            for slot in (0..trace.len()).step_by(97) {
                let mut frame = trace.frame(slot);
                let src = be32(&frame, l.src_low32());
                let flow = trace.flow_of_source(src).unwrap();
                let off = trace
                    .stream_offset(flow, be32(&frame, l.tcp_seq()))
                    .unwrap();
                let salt = salts[flow as usize];
                assert!(w.pattern_matches(&frame[l.headers_len..], off as u64, salt));
                frame[l.headers_len + 700] ^= 4;
                assert!(!w.pattern_matches(&frame[l.headers_len..], off as u64, salt));
            }
        }
    }

    #[test]
    fn the_mix_has_its_shares_and_every_ack_is_cumulative() {
        let w = Workload::generate(WorkloadSpec {
            packets: 40_000,
            ..spec(Kind::Mix, false)
        })
        .unwrap();
        let [tcp_in, tcp_out, acks, udp, other] = w.census();
        let n = w.len() as f64;
        assert!(
            (0.5..0.7).contains(&(tcp_in as f64 / n)),
            "{:?}",
            w.census()
        );
        assert!(
            tcp_out > 0 && acks > tcp_out && udp > 0 && other > 0,
            "{:?}",
            w.census()
        );
        assert!((0.05..0.15).contains(&(udp as f64 / n)), "{:?}", w.census());
        // Each outbound flow is acknowledged in full, never backwards.
        let mut last = vec![0u32; w.out_stream_bytes.len()];
        for f in &w.frames {
            if let Frame::AckOut { flow, acked } = *f {
                assert!(acked > last[flow as usize]);
                last[flow as usize] = acked;
            }
        }
        for (f, &bytes) in w.out_stream_bytes.iter().enumerate() {
            assert_eq!(u64::from(last[f]), bytes, "flow {f}");
        }
        assert_eq!(w.handshakes.len(), 3);
    }
}
