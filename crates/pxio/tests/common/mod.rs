//! Shared test machinery: real TCP/IPv4/IPv6 frames built with etherparse, random flows cut into
//! segments carrying what real traffic carries (ACK, window, ECN and timestamp changes, VLAN
//! tags, IPv4 options, IPv6 extension headers, chained LRO-style buffers, partial
//! retransmissions with different bytes), perturbed like a network would, and a checker for what
//! the engine emitted.

#![allow(dead_code)]

use std::collections::HashMap;

use etherparse::{
    InternetSlice, IpDscp, IpEcn, IpHeaders, IpNumber, Ipv4Extensions, Ipv4Header, Ipv6Extensions,
    Ipv6FlowLabel, Ipv6Header, Ipv6RawExtHeader, PacketBuilder, SlicedPacket, TransportSlice,
    VlanId,
};
use proptest::prelude::*;
use pxio::merge::{DelayConfig, MergeConfig, Merger};
use pxio::{HeapBuf, HeapPool, PacketBuf, TxOffload};

pub const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// TCP timestamps option (NOP NOP TS): the common case on the Internet; 12 B of options.
pub fn ts_option(tsval: u32) -> [u8; 12] {
    let mut o = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0];
    o[4..8].copy_from_slice(&tsval.to_be_bytes());
    o[8..12].copy_from_slice(&7u32.to_be_bytes());
    o
}
/// TCP header length of every generated segment (20 B + the timestamps option).
pub const TCP_LEN: usize = 32;
/// IPv4 Router Alert (RFC 2113): the option a segment with IPv4 options carries here.
const ROUTER_ALERT: [u8; 4] = [148, 4, 0, 0];
/// An IPv6 hop-by-hop header holding only padding (PadN): 8 bytes.
const HOP_BY_HOP_PADN: [u8; 6] = [1, 4, 0, 0, 0, 0];

/// One TCP flow's static properties.
#[derive(Clone, Debug, Default)]
pub struct FlowSpec {
    pub v6: bool,
    pub id: u8,
    pub sport: u16,
    pub dport: u16,
    pub isn: u32,
    pub ack: u32,
    pub df: bool,
    pub ttl: u8,
    /// TOS byte / traffic class the flow starts with (DSCP and ECN).
    pub tos: u8,
    /// VLAN IDs: none, one (802.1Q) or two (802.1ad outer, 802.1Q inner).
    pub vlan: Vec<u16>,
    /// IPv6 only: every segment carries a hop-by-hop extension header.
    pub v6_ext: bool,
}

impl FlowSpec {
    pub fn src_v4(&self) -> [u8; 4] {
        [198, 18, 1, self.id]
    }
    pub fn dst_v4(&self) -> [u8; 4] {
        [198, 18, 2, 1]
    }
    pub fn src_v6(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        a[15] = self.id;
        a
    }
    pub fn dst_v6(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        a[14] = 2;
        a
    }
    /// IP and TCP header bytes of a segment without IPv4 options.
    pub fn l3_l4_len(&self) -> usize {
        (if self.v6 {
            40 + 8 * usize::from(self.v6_ext)
        } else {
            20
        }) + TCP_LEN
    }
}

/// What kind of TCP segment to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegFlags {
    pub psh: bool,
    pub fin: bool,
    pub syn: bool,
    pub rst: bool,
    /// URG with this urgent pointer.
    pub urg: Option<u16>,
}

/// The header fields that may change inside a flow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegHdr {
    pub ack: u32,
    pub window: u16,
    /// IPv4 TOS byte or IPv6 traffic class.
    pub tos: u8,
    /// IPv6 flow label (always 0 for IPv4).
    pub flow_label: u32,
    pub tsval: u32,
    pub vlan: Vec<u16>,
    /// IPv4: the header carries a Router Alert option (IHL 6). IPv6: the segment carries a
    /// hop-by-hop extension header, in a flow whose other segments have none.
    pub ip_opts: bool,
}

impl SegHdr {
    /// A flow's headers at its start, with timestamp `tsval`.
    pub fn of(flow: &FlowSpec, tsval: u32) -> Self {
        Self {
            ack: flow.ack,
            window: 65000,
            tos: flow.tos,
            flow_label: if flow.v6 {
                0x1_0000 | u32::from(flow.id)
            } else {
                0
            },
            tsval,
            vlan: flow.vlan.clone(),
            ip_opts: false,
        }
    }
    /// Whether segments with headers `self` and `other` may be merged (the window may differ:
    /// the merged packet carries the last one's; IPv6 flow labels may not, as in Linux GRO).
    pub fn mergeable_with(&self, other: &SegHdr) -> bool {
        self.ack == other.ack
            && self.tos == other.tos
            && self.flow_label == other.flow_label
            && self.tsval == other.tsval
            && self.vlan == other.vlan
            && !self.ip_opts
            && !other.ip_opts
    }
}

/// Builds one Ethernet frame of `flow` carrying `payload` at `seq`, with the flow's initial
/// headers and timestamp `tsval`.
pub fn tcp_frame(
    flow: &FlowSpec,
    seq: u32,
    ip_id: u16,
    tsval: u32,
    f: SegFlags,
    payload: &[u8],
) -> Vec<u8> {
    build_frame(flow, &SegHdr::of(flow, tsval), seq, ip_id, f, payload)
}

/// Builds one Ethernet frame of `flow` with headers `hdr` carrying `payload` at `seq`.
pub fn build_frame(
    flow: &FlowSpec,
    hdr: &SegHdr,
    seq: u32,
    ip_id: u16,
    f: SegFlags,
    payload: &[u8],
) -> Vec<u8> {
    let ip = if flow.v6 {
        let h = Ipv6Header {
            traffic_class: hdr.tos,
            flow_label: Ipv6FlowLabel::try_new(hdr.flow_label).unwrap(),
            next_header: IpNumber::TCP,
            hop_limit: flow.ttl,
            source: flow.src_v6(),
            destination: flow.dst_v6(),
            ..Ipv6Header::default()
        };
        let mut ext = Ipv6Extensions::default();
        if flow.v6_ext || hdr.ip_opts {
            ext.hop_by_hop_options =
                Some(Ipv6RawExtHeader::new_raw(IpNumber::TCP, &HOP_BY_HOP_PADN).unwrap());
        }
        IpHeaders::Ipv6(h, ext)
    } else {
        let mut h =
            Ipv4Header::new(0, flow.ttl, IpNumber::TCP, flow.src_v4(), flow.dst_v4()).unwrap();
        h.identification = ip_id;
        h.dont_fragment = flow.df;
        h.dscp = IpDscp::try_new(hdr.tos >> 2).unwrap();
        h.ecn = IpEcn::try_new(hdr.tos & 3).unwrap();
        if hdr.ip_opts {
            h.options = ROUTER_ALERT.into();
        }
        IpHeaders::Ipv4(h, Ipv4Extensions::default())
    };
    let eth = PacketBuilder::ethernet2(SRC_MAC, DST_MAC);
    let vid = |v: u16| VlanId::try_new(v & 0xfff).unwrap();
    let ip = match hdr.vlan.as_slice() {
        [] => eth.ip(ip),
        [tag] => eth.single_vlan(vid(*tag)).ip(ip),
        [outer, inner, ..] => eth.double_vlan(vid(*outer), vid(*inner)).ip(ip),
    };
    let mut tcp = ip
        .tcp(flow.sport, flow.dport, seq, hdr.window)
        .ack(hdr.ack)
        .options_raw(&ts_option(hdr.tsval))
        .unwrap();
    if f.psh {
        tcp = tcp.psh();
    }
    if f.fin {
        tcp = tcp.fin();
    }
    if f.syn {
        tcp = tcp.syn();
    }
    if f.rst {
        tcp = tcp.rst();
    }
    if let Some(ptr) = f.urg {
        tcp = tcp.urg(ptr);
    }
    let mut out = Vec::with_capacity(tcp.size(payload.len()));
    tcp.write(&mut out, payload).unwrap();
    out
}

/// Bytes before the TCP payload of a frame of `flow` with headers `hdr`.
pub fn header_len(flow: &FlowSpec, hdr: &SegHdr) -> usize {
    14 + 4 * hdr.vlan.len().min(2)
        + flow.l3_l4_len()
        + if flow.v6 { 8 } else { 4 } * usize::from(hdr.ip_opts)
}

/// An input packet and what the checker needs to know about it.
#[derive(Clone, Debug, Default)]
pub struct Input {
    pub frame: Vec<u8>,
    /// `Some(flow index)` for TCP segments of a generated flow.
    pub flow: Option<usize>,
    /// Payload offset in the flow's stream and length.
    pub offset: usize,
    pub len: usize,
    /// The payload bytes carried (a retransmission may carry other bytes than the stream).
    pub payload: Vec<u8>,
    pub flags: SegFlags,
    pub hdr: SegHdr,
    pub ip_id: u16,
    /// Junk that must come out untouched.
    pub junk: bool,
    /// Offsets at which the frame is cut into a chain of buffers (an LRO-style input); the
    /// headers always stay in the first one.
    pub chain: Vec<usize>,
}

impl Input {
    /// A TCP segment of flow `fi` carrying `payload` at stream `offset`.
    pub fn data(
        flow: &FlowSpec,
        fi: usize,
        offset: usize,
        payload: &[u8],
        ip_id: u16,
        hdr: SegHdr,
        flags: SegFlags,
    ) -> Input {
        let seq = flow.isn.wrapping_add(offset as u32);
        Input {
            frame: build_frame(flow, &hdr, seq, ip_id, flags, payload),
            flow: Some(fi),
            offset,
            len: payload.len(),
            payload: payload.to_vec(),
            flags,
            hdr,
            ip_id,
            ..Input::default()
        }
    }
}

/// A generated case: flows with their byte streams, and the input sequence.
#[derive(Clone, Debug)]
pub struct Case {
    pub flows: Vec<FlowSpec>,
    pub streams: Vec<Vec<u8>>,
    pub inputs: Vec<Input>,
    /// Burst boundaries and the time gap before each burst (ns).
    pub bursts: Vec<(usize, u64)>,
}

/// Parameters of the input generation and perturbation.
#[derive(Clone, Debug)]
pub struct Knobs {
    pub max_flows: usize,
    pub max_stream: usize,
    pub max_seg: usize,
    /// ACK, window, ECN (CE marks), timestamp and VLAN changes inside a flow.
    pub header_changes: bool,
    /// VLAN tags, IPv4 options on some segments, whole IPv6 flows with extension headers.
    pub encapsulation: bool,
    /// Some inputs arrive as chains of 2..=4 buffers.
    pub chains: bool,
    /// Partial retransmissions carrying different bytes (valid checksums).
    pub retransmissions: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            max_flows: 4,
            max_stream: 24_000,
            max_seg: 1448,
            header_changes: true,
            encapsulation: true,
            chains: true,
            retransmissions: true,
        }
    }
}

pub fn flow_strategy(id: u8, encapsulation: bool) -> impl Strategy<Value = FlowSpec> {
    (
        any::<bool>(),
        any::<u32>(),
        any::<u32>(),
        any::<bool>(),
        1u8..=255,
        // Best effort, ECT(0), EF with ECT(1).
        prop_oneof![Just(0u8), Just(0x02), Just(0xb9)],
        prop_oneof![
            Just(vec![]),
            (1u16..4095).prop_map(|v| vec![v]),
            (1u16..4095, 1u16..4095).prop_map(|(o, i)| vec![o, i]),
        ],
        prop::bool::weighted(0.25),
    )
        .prop_map(move |(v6, isn, ack, df, ttl, tos, vlan, ext)| FlowSpec {
            v6,
            id,
            sport: 40000 + u16::from(id),
            dport: 443,
            isn,
            ack,
            df,
            ttl,
            tos,
            vlan: if encapsulation { vlan } else { vec![] },
            // Whole flows; single segments of other IPv6 flows get one through `ip_opts`.
            v6_ext: encapsulation && v6 && ext,
        })
}

/// Random flows, streams, segmentation and perturbation.
pub fn case_strategy(knobs: Knobs) -> impl Strategy<Value = Case> {
    let k = knobs.clone();
    (1..=knobs.max_flows)
        .prop_flat_map(move |n| {
            let flows: Vec<_> = (0..n)
                .map(|i| flow_strategy(i as u8 + 1, k.encapsulation))
                .collect();
            let streams: Vec<_> = (0..n)
                .map(|_| prop::collection::vec(any::<u8>(), 1..k.max_stream))
                .collect();
            (flows, streams, any::<u64>())
        })
        .prop_map(move |(flows, streams, seed)| build_case(flows, streams, seed, &knobs))
}

/// A small deterministic PRNG for perturbations (proptest shrinks the seed).
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// 1..=3 cut points strictly inside the payload part of `inp`'s frame.
pub fn chain_points(rng: &mut Rng, inp: &Input, headers: usize) -> Vec<usize> {
    let room = inp.frame.len().saturating_sub(headers + 1);
    if room == 0 {
        return Vec::new();
    }
    let mut points: Vec<usize> = (0..1 + rng.below(3))
        .map(|_| headers + 1 + rng.below(room as u64) as usize)
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

pub fn build_case(flows: Vec<FlowSpec>, streams: Vec<Vec<u8>>, seed: u64, k: &Knobs) -> Case {
    let mut rng = Rng::new(seed);
    let mut per_flow: Vec<Vec<Input>> = Vec::new();
    for (fi, (flow, stream)) in flows.iter().zip(&streams).enumerate() {
        let mut list = Vec::new();
        let mut off = 0;
        let mut ip_id = rng.next() as u16;
        let mut hdr = SegHdr::of(flow, 1000);
        while off < stream.len() {
            // Mostly full-sized segments, sometimes random sizes.
            let len = if rng.chance(700) {
                k.max_seg
            } else {
                1 + rng.below(k.max_seg as u64) as usize
            }
            .min(stream.len() - off);
            let last = off + len == stream.len();
            let flags = SegFlags {
                psh: rng.chance(40) || last,
                fin: last && rng.chance(500),
                ..SegFlags::default()
            };
            // Lasting changes: neighbours must not merge across them (but across a window
            // change, they may).
            if rng.chance(20) {
                hdr.tsval += 1;
            }
            if k.header_changes {
                if rng.chance(20) {
                    hdr.ack = hdr.ack.wrapping_add(1 + rng.below(1 << 16) as u32);
                }
                if rng.chance(40) {
                    hdr.window = rng.next() as u16;
                }
                if rng.chance(5) && !hdr.vlan.is_empty() {
                    hdr.vlan[0] ^= 1; // re-tagged on the way
                }
                if rng.chance(15) && flow.v6 {
                    // A new flow label (Linux picks one on a retransmission timeout).
                    hdr.flow_label = rng.next() as u32 & 0xf_ffff;
                }
            }
            // One-off changes: a CE mark, IPv4 options.
            let mut seg_hdr = hdr.clone();
            if k.header_changes && rng.chance(20) {
                seg_hdr.tos |= 3;
            }
            if k.encapsulation && !flow.v6_ext && rng.chance(30) {
                seg_hdr.ip_opts = true;
            }
            let payload = &stream[off..off + len];
            let mut inp = Input::data(flow, fi, off, payload, ip_id, seg_hdr, flags);
            if k.chains && rng.chance(150) {
                inp.chain = chain_points(&mut rng, &inp, header_len(flow, &inp.hdr));
            }
            list.push(inp);
            ip_id = ip_id.wrapping_add(1);
            off += len;
        }
        for _ in 0..2 {
            if k.retransmissions && rng.chance(350) {
                retransmit(&mut rng, flow, fi, &mut list, k.max_seg);
            }
        }
        // A RST or SYN now and then, never merged (zero payload, so it carries no stream bytes).
        if rng.chance(200) {
            let flags = SegFlags {
                rst: rng.chance(500),
                syn: true,
                ..SegFlags::default()
            };
            let at = rng.below(list.len() as u64 + 1) as usize;
            list.insert(at, Input::data(flow, fi, 0, &[], 0, hdr.clone(), flags));
        }
        per_flow.push(list);
    }
    // Interleave flows randomly (a switch), keeping each flow's order.
    let mut inputs = Vec::new();
    let mut cursors = vec![0usize; per_flow.len()];
    loop {
        let live: Vec<usize> = (0..per_flow.len())
            .filter(|&f| cursors[f] < per_flow[f].len())
            .collect();
        if live.is_empty() {
            break;
        }
        let f = live[rng.below(live.len() as u64) as usize];
        inputs.push(per_flow[f][cursors[f]].clone());
        cursors[f] += 1;
    }
    // Perturb: adjacent swaps, duplicates, drops, junk.
    let mut i = 0;
    while i + 1 < inputs.len() {
        if rng.chance(30) {
            inputs.swap(i, i + 1);
        }
        i += 1;
    }
    let mut out = Vec::with_capacity(inputs.len());
    for inp in inputs {
        if rng.chance(15) {
            continue; // dropped on the way
        }
        if rng.chance(15) {
            out.push(inp.clone()); // duplicated
        }
        out.push(inp);
        if rng.chance(10) {
            out.push(junk(&mut rng));
        }
    }
    // Bursts of 1..=32 packets with gaps of 0..=40 µs.
    let mut bursts = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let n = 1 + rng.below(32) as usize;
        at = (at + n).min(out.len());
        bursts.push((at, rng.below(40_000)));
    }
    Case {
        flows,
        streams,
        inputs: out,
        bursts,
    }
}

/// Adds one retransmission to a flow's segment `list`: a range `[x, y)` of the stream cut
/// differently from the original segments (TCP may repacketize), carrying DIFFERENT bytes with
/// a valid checksum, placed anywhere in the flow: before, among or after the data it overlaps,
/// starting and ending anywhere (on segment boundaries or not).
///
/// What is expected: the engine never merges overlapping data, so the receiver sees, for every
/// stream offset, the same copies in the same order as it would without the engine.
fn retransmit(rng: &mut Rng, flow: &FlowSpec, fi: usize, list: &mut Vec<Input>, max_seg: usize) {
    let total = list.iter().map(|i| i.offset + i.len).max().unwrap_or(0);
    if total == 0 {
        return;
    }
    let x = rng.below(total as u64) as usize;
    let y = (x + 1 + rng.below(max_seg as u64) as usize).min(total);
    let payload: Vec<u8> = (x..y)
        .map(|o| {
            let original = list
                .iter()
                .find(|i| (i.offset..i.offset + i.len).contains(&o))
                .map_or(0, |i| i.payload[o - i.offset]);
            original ^ 0xa5
        })
        .collect();
    let hdr = list[rng.below(list.len() as u64) as usize].hdr.clone();
    let inp = Input::data(
        flow,
        fi,
        x,
        &payload,
        rng.next() as u16,
        hdr,
        SegFlags::default(),
    );
    let at = rng.below(list.len() as u64 + 1) as usize;
    list.insert(at, inp);
}

/// Malformed or non-TCP frames that must pass through byte for byte.
fn junk(rng: &mut Rng) -> Input {
    let kind = rng.below(4);
    let other = |id| FlowSpec {
        v6: false,
        id,
        sport: 1,
        dport: 2,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    };
    let frame = match kind {
        // Random bytes.
        0 => (0..rng.below(80)).map(|_| rng.next() as u8).collect(),
        // A TCP frame truncated inside its header.
        1 => {
            let full = tcp_frame(&other(250), 0, 0, 0, SegFlags::default(), b"abc");
            full[..30].to_vec()
        }
        // IPv4 with a total length longer than the frame.
        2 => {
            let mut full = tcp_frame(&other(251), 0, 0, 0, SegFlags::default(), b"abcdef");
            full[16] = 0x40; // total length 16K
            full
        }
        // UDP.
        _ => {
            let b = PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
                .ipv4([198, 18, 9, 9], [198, 18, 2, 1], 64)
                .udp(53, 53);
            let mut v = Vec::new();
            b.write(&mut v, b"not tcp").unwrap();
            v
        }
    };
    Input {
        frame,
        junk: true,
        ..Input::default()
    }
}

/// Parsed view of one emitted TCP packet of a generated flow.
#[derive(Debug)]
pub struct Emitted {
    pub flow: usize,
    pub seq: u32,
    pub payload: Vec<u8>,
    pub psh: bool,
    pub fin: bool,
    pub syn: bool,
    pub rst: bool,
    pub ip_len: usize,
    /// The headers as a [`SegHdr`] (timestamp read from the options).
    pub hdr: SegHdr,
    pub ip_id: u16,
    pub v6_ext: bool,
}

/// Which input's copy each payload byte of one emitted packet is: runs of
/// `(input index, first stream offset, end offset)`.
type Pieces = Vec<(usize, usize, usize)>;

/// Checks everything a receiver would notice, and returns the emitted TCP packets by flow.
///
/// - Junk passes untouched; no packet exceeds the iMTU; IPv4 and TCP checksums verify.
/// - Bytes: for every stream offset, the copies delivered are the copies that arrived, with
///   their values, in arrival order (the engine never merges overlapping data, so this is what
///   the receiver would see without it).
/// - Order: every packet of a flow keeps its order relative to that flow's held data: a byte
///   may leave before a byte that arrived earlier only if it lies below it in sequence space
///   (the engine sorts held items by sequence number, never the other way round).
/// - Merge decisions: a packet's headers are those of the input holding its first byte (IP ID
///   included), but its window is that of the input holding its last byte (the most recent
///   advertisement); every input merged into it has the same ACK, TOS/ECN, IPv6 flow label,
///   timestamps and VLAN tags; none with IPv4 options or IPv6 extension headers is merged; with DF=0, merged
///   inputs have consecutive IP IDs. PSH/FIN sit on the last byte; SYN/RST leave alone.
pub fn check_outputs(case: &Case, outputs: &[Vec<u8>], imtu: usize) -> Vec<Emitted> {
    let junk_in: Vec<&Vec<u8>> = case
        .inputs
        .iter()
        .filter(|i| i.junk)
        .map(|i| &i.frame)
        .collect();
    let mut junk_out: Vec<&Vec<u8>> = Vec::new();
    let mut emitted = Vec::new();
    for frame in outputs {
        let Some(e) = parse_ours(case, frame) else {
            junk_out.push(frame);
            continue;
        };
        assert!(
            e.ip_len <= imtu,
            "emitted IP packet of {} B > iMTU {imtu}",
            e.ip_len
        );
        emitted.push(e);
    }
    let mut a: Vec<_> = junk_in.clone();
    let mut b: Vec<_> = junk_out.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b, "non-TCP and malformed frames pass through untouched");
    for (fi, flow) in case.flows.iter().enumerate() {
        check_flow(case, fi, flow, &emitted);
    }
    // SYN / RST segments come out alone, unmerged.
    let syn_in = case
        .inputs
        .iter()
        .filter(|i| i.flags.syn || i.flags.rst)
        .count();
    let syn_out = emitted.iter().filter(|e| e.syn || e.rst).count();
    assert_eq!(syn_in, syn_out);
    assert!(emitted
        .iter()
        .filter(|e| e.syn || e.rst)
        .all(|e| e.payload.is_empty()));
    emitted
}

fn check_flow(case: &Case, fi: usize, flow: &FlowSpec, emitted: &[Emitted]) {
    let stream_len = case.streams[fi].len();
    // Which inputs carried each offset, in arrival order.
    let mut arrivals: Vec<Vec<usize>> = vec![Vec::new(); stream_len];
    for (idx, inp) in case.inputs.iter().enumerate() {
        if inp.flow == Some(fi) {
            for a in &mut arrivals[inp.offset..inp.offset + inp.len] {
                a.push(idx);
            }
        }
    }
    let mut taken = vec![0usize; stream_len];
    let mut earlier: Pieces = Vec::new();
    for e in emitted
        .iter()
        .filter(|e| e.flow == fi && !e.payload.is_empty())
    {
        let off = e.seq.wrapping_sub(flow.isn) as usize;
        assert!(
            off + e.payload.len() <= stream_len,
            "flow {fi}: bytes beyond the stream"
        );
        let mut pieces: Pieces = Vec::new();
        for (k, &byte) in e.payload.iter().enumerate() {
            let o = off + k;
            let n = taken[o];
            let Some(&idx) = arrivals[o].get(n) else {
                panic!("flow {fi}: byte {o} delivered more often than it arrived");
            };
            taken[o] += 1;
            let inp = &case.inputs[idx];
            assert_eq!(
                byte,
                inp.payload[o - inp.offset],
                "flow {fi}: copy {n} of byte {o} is not what arrival {n} (input #{idx}) carried"
            );
            match pieces.last_mut() {
                Some(p) if p.0 == idx => p.2 = o + 1,
                _ => pieces.push((idx, o, o + 1)),
            }
        }
        // Order against what left before: a later (or the same) arrival may have left first
        // only if all of it lies below.
        for &(v_idx, v_start, v_end) in &pieces {
            for &(u_idx, u_start, u_end) in &earlier {
                assert!(
                    u_idx < v_idx || u_end <= v_start,
                    "flow {fi}: bytes {u_start}..{u_end} (input #{u_idx}) left before bytes \
                     {v_start}..{v_end} (input #{v_idx}), which arrived {} and lie below them: \
                     the flow was reordered against its held data",
                    if u_idx == v_idx {
                        "with them"
                    } else {
                        "earlier"
                    }
                );
            }
        }
        check_merge_decision(case, fi, flow, e, &pieces);
        earlier.extend(pieces);
    }
    for (o, (&t, a)) in taken.iter().zip(&arrivals).enumerate() {
        assert_eq!(
            t,
            a.len(),
            "flow {fi}: byte {o} delivered {t} times, arrived {} times",
            a.len()
        );
    }
    // PSH stays on the last byte of the segment that carried it.
    for inp in case
        .inputs
        .iter()
        .filter(|i| i.flow == Some(fi) && i.flags.psh && i.len > 0)
    {
        let end = inp.offset + inp.len;
        assert!(
            emitted.iter().any(|e| e.flow == fi
                && e.psh
                && e.seq.wrapping_sub(flow.isn) as usize + e.payload.len() == end),
            "flow {fi}: PSH at stream offset {end} is on the last byte of an emitted packet"
        );
    }
    for e in emitted.iter().filter(|e| e.flow == fi && e.fin) {
        let end = e.seq.wrapping_sub(flow.isn) as usize + e.payload.len();
        assert_eq!(end, stream_len, "flow {fi}: FIN on the last byte");
    }
}

/// The headers of emitted packet `e` (made of `pieces`) are those of the input holding its
/// first byte, its window that of the input holding its last byte, and only inputs that may be
/// merged were.
fn check_merge_decision(case: &Case, fi: usize, flow: &FlowSpec, e: &Emitted, pieces: &Pieces) {
    let first = &case.inputs[pieces[0].0];
    let last = &case.inputs[pieces[pieces.len() - 1].0];
    let what = |field: &str| format!("flow {fi}: the {field} of a packet is its first input's");
    let expected = SegHdr {
        window: last.hdr.window,
        ..first.hdr.clone()
    };
    assert_eq!(
        e.hdr, expected,
        "flow {fi}: a packet has its first input's headers and its last input's window"
    );
    assert_eq!(
        e.v6_ext,
        flow.v6_ext || (flow.v6 && first.hdr.ip_opts),
        "{}",
        what("extension header")
    );
    if !flow.v6 {
        assert_eq!(e.ip_id, first.ip_id, "{}", what("IP ID"));
    }
    let mut prev = first;
    for &(idx, start, _) in &pieces[1..] {
        let inp = &case.inputs[idx];
        assert!(
            first.hdr.mergeable_with(&inp.hdr),
            "flow {fi}: input #{idx} (offset {start}, headers {:?}) merged into a packet with \
             headers {:?}",
            inp.hdr,
            first.hdr
        );
        assert!(
            !flow.v6_ext,
            "flow {fi}: segments with IPv6 extension headers merged"
        );
        if !flow.v6 && !flow.df {
            assert_eq!(
                inp.ip_id,
                prev.ip_id.wrapping_add(1),
                "flow {fi}: DF=0 segments merged across an IP ID gap"
            );
        }
        prev = inp;
    }
}

/// Parses a frame of one of the case's flows, verifying IP and TCP checksums.
fn parse_ours(case: &Case, frame: &[u8]) -> Option<Emitted> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let (ip_len, flow, tos, flow_label, ip_id, ip_opts, v6_ext) =
        match p.net.clone()? {
            etherparse::NetSlice::Ipv4(ip) => {
                let h = ip.header();
                let fi = case.flows.iter().position(|f| {
                    !f.v6 && f.src_v4() == h.source() && f.dst_v4() == h.destination()
                })?;
                assert!(
                    h.to_header().calc_header_checksum() == h.header_checksum(),
                    "IPv4 header checksum"
                );
                let tos = h.dcp().value() << 2 | h.ecn().value();
                (
                    h.total_len() as usize,
                    fi,
                    tos,
                    0,
                    h.identification(),
                    h.ihl() > 5,
                    false,
                )
            }
            etherparse::NetSlice::Ipv6(ip) => {
                let h = ip.header();
                let fi = case.flows.iter().position(|f| {
                    f.v6 && f.src_v6() == h.source() && f.dst_v6() == h.destination()
                })?;
                let ext = !ip.extensions().is_empty();
                (
                    40 + h.payload_length() as usize,
                    fi,
                    h.traffic_class(),
                    h.flow_label().value(),
                    0,
                    ext && !case.flows[fi].v6_ext,
                    ext,
                )
            }
            etherparse::NetSlice::Arp(_) => return None,
        };
    let vlan: Vec<u16> = p.vlan_ids().iter().map(|id| id.value()).collect();
    let Some(TransportSlice::Tcp(tcp)) = p.transport else {
        return None;
    };
    let header = tcp.to_header();
    let payload = tcp.payload();
    let ok = match p.net.unwrap() {
        InternetSlice::Ipv4(ip) => header
            .calc_checksum_ipv4(&ip.header().to_header(), payload)
            .unwrap(),
        InternetSlice::Ipv6(ip) => header
            .calc_checksum_ipv6(&ip.header().to_header(), payload)
            .unwrap(),
        InternetSlice::Arp(_) => unreachable!("TCP is never carried over ARP"),
    };
    assert_eq!(
        ok, header.checksum,
        "TCP checksum of an emitted packet verifies"
    );
    let opts = header.options.as_slice();
    let tsval = if opts.len() == 12 && opts[2] == 8 {
        u32::from_be_bytes(opts[4..8].try_into().unwrap())
    } else {
        u32::MAX
    };
    Some(Emitted {
        flow,
        seq: header.sequence_number,
        payload: payload.to_vec(),
        psh: header.psh,
        fin: header.fin,
        syn: header.syn,
        rst: header.rst,
        ip_len,
        hdr: SegHdr {
            ack: header.acknowledgment_number,
            window: header.window_size,
            tos,
            flow_label,
            tsval,
            vlan,
            ip_opts,
        },
        ip_id,
        v6_ext,
    })
}

/// Arrival time of each input (ns) from the case's burst gaps.
pub fn arrival_times(case: &Case) -> Vec<u64> {
    let mut times = vec![0u64; case.inputs.len()];
    let (mut start, mut now) = (0usize, 1_000u64);
    for &(end, gap) in &case.bursts {
        now += gap;
        for t in &mut times[start..end] {
            *t = now;
        }
        start = end;
    }
    times
}

/// Counts (tests for hash maps of frames).
pub fn multiset<T: std::hash::Hash + Eq>(items: impl IntoIterator<Item = T>) -> HashMap<T, usize> {
    let mut m = HashMap::new();
    for i in items {
        *m.entry(i).or_default() += 1;
    }
    m
}

/// Flips one payload byte of input `index` (a data segment) without fixing its checksum, and
/// returns the stream offset of the corrupted byte.
pub fn corrupt_one(case: &mut Case, pick: usize) -> Option<(usize, usize)> {
    let data: Vec<usize> = (0..case.inputs.len())
        .filter(|&i| case.inputs[i].flow.is_some() && case.inputs[i].len > 0)
        .collect();
    let i = *data.get(pick % data.len().max(1))?;
    let inp = &mut case.inputs[i];
    let at = inp.frame.len() - 1 - (pick % inp.len);
    inp.frame[at] ^= 0x5a;
    let stream_offset = inp.offset + inp.len - 1 - (pick % inp.len);
    Some((inp.flow.unwrap(), stream_offset))
}

/// What a receiving NIC with checksum offload says of `frame`: the IPv4 header checksum's
/// verdict (none for IPv6), and the TCP checksum's (none for anything but TCP).
#[allow(dead_code)] // not every test binary plays the NIC
pub fn nic_rx_verdicts(frame: &[u8]) -> (Option<bool>, Option<bool>) {
    use etherparse::{NetSlice, SlicedPacket};
    let ip = match SlicedPacket::from_ethernet(frame).ok().and_then(|p| p.net) {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header();
            Some(h.to_header().calc_header_checksum() == h.header_checksum())
        }
        _ => None,
    };
    (ip, tcp_verdict(frame).map(|v| v.2))
}

/// Whether a frame's TCP checksum verifies, with its flow, seq and payload.
pub fn tcp_verdict(frame: &[u8]) -> Option<(u32, Vec<u8>, bool, [u8; 16])> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(TransportSlice::Tcp(tcp)) = p.transport else {
        return None;
    };
    let header = tcp.to_header();
    let payload = tcp.payload();
    let (expected, src) = match p.net? {
        InternetSlice::Ipv4(ip) => {
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&ip.header().source());
            (
                header
                    .calc_checksum_ipv4(&ip.header().to_header(), payload)
                    .ok()?,
                src,
            )
        }
        InternetSlice::Ipv6(ip) => (
            header
                .calc_checksum_ipv6(&ip.header().to_header(), payload)
                .ok()?,
            ip.header().source(),
        ),
        InternetSlice::Arp(_) => return None,
    };
    Some((
        header.sequence_number,
        payload.to_vec(),
        expected == header.checksum,
        src,
    ))
}

/// Most a segment may wait: the window cap plus the largest gap between two polls.
pub const MAX_WINDOW_NS: u64 = 50_000;
pub const MAX_POLL_GAP_NS: u64 = 40_000;

pub fn config(imtu: u16, delay: bool) -> MergeConfig {
    MergeConfig {
        imtu,
        flow_capacity: 8, // small, so evictions happen too
        max_items_per_flow: 4,
        delay: DelayConfig {
            enabled: delay,
            rate_threshold_bps: 1.0, // every flow is "fast": the delay path runs
            yield_bypass: 1.0,
            max_window_ns: MAX_WINDOW_NS,
            ..DelayConfig::default()
        },
        ..MergeConfig::default()
    }
}

/// The input as a buffer made by `make`: one segment, or a chain cut where the input says.
pub fn assemble<B: PacketBuf>(inp: &Input, make: &impl Fn(&[u8]) -> B) -> B {
    let mut at = 0;
    let mut pkt: Option<B> = None;
    for &cut in inp.chain.iter().chain(std::iter::once(&inp.frame.len())) {
        let part = make(&inp.frame[at..cut]);
        at = cut;
        match &mut pkt {
            None => pkt = Some(part),
            Some(head) => assert!(head.chain(part).is_ok(), "test chains are short"),
        }
    }
    pkt.expect("at least one part")
}

/// Feeds `case` to a merger (inputs made by `make`, chained where the case says) and returns
/// the emitted frames.
pub fn run<B: PacketBuf>(
    case: &Case,
    merger: &mut Merger<B>,
    make: impl Fn(&[u8]) -> B,
) -> Vec<Vec<u8>> {
    run_with(case, merger, |_, i| assemble(i, &make), |p| p.to_vec())
}

/// [`run`], with each input built by `make` from its index in the case and itself, and each
/// packet that leaves turned into what the test keeps by `keep`, as it leaves (so buffers go
/// back to their pool burst by burst).
pub fn run_with<B: PacketBuf, T>(
    case: &Case,
    merger: &mut Merger<B>,
    make: impl Fn(usize, &Input) -> B,
    mut keep: impl FnMut(B) -> T,
) -> Vec<T> {
    let times = arrival_times(case);
    let mut out = Vec::new();
    let mut kept = Vec::new();
    let mut start = 0;
    let mut now = 0;
    for &(end, _) in &case.bursts {
        now = times[start];
        merger.poll(now, &mut out);
        let burst: Vec<B> = (start..end).map(|k| make(k, &case.inputs[k])).collect();
        merger.rx_burst(burst, now, &mut out);
        kept.extend(out.drain(..).map(&mut keep));
        start = end;
    }
    // Then, with nothing more to receive, a poll loop polls at each pending deadline (a poll at
    // the window's end alone could come up to a window late for an item whose deadline fell
    // just after the last burst).
    for _ in 0..4 * case.inputs.len() + 16 {
        let Some(due) = merger.next_deadline() else {
            break;
        };
        now = now.max(due);
        merger.poll(now, &mut out);
    }
    assert_eq!(
        merger.stats().held_items,
        0,
        "poll released every delayed item"
    );
    merger.flush_all(now, &mut out);
    kept.extend(out.drain(..).map(&mut keep));
    kept
}

/// `inp` as a NIC hands it over: with the checksum verdicts a NIC would give its frame, and
/// `rss` as its RSS hash.
pub fn nic_packet(pool: &HeapPool, inp: &Input, rss: Option<u32>) -> HeapBuf {
    let mut b = assemble(inp, &|f: &[u8]| pool.packet(f));
    let (ip, l4) = nic_rx_verdicts(&inp.frame);
    b.set_ip_csum_verdict(ip);
    b.set_l4_csum_verdict(l4);
    b.set_rss_hash(rss);
    b
}

/// `n` back-to-back segments of `mss` payload bytes of `fl`, as frames: byte `k` of the stream
/// is `k as u8`, segment `i` has IP ID `i`.
pub fn segment_frames(fl: &FlowSpec, n: u32, mss: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let start = i as usize * mss;
            let payload: Vec<u8> = (start..start + mss).map(|k| k as u8).collect();
            let seq = fl.isn.wrapping_add(start as u32);
            tcp_frame(fl, seq, i as u16, 1, Default::default(), &payload)
        })
        .collect()
}

/// A plain flow: IPv6 for even ids, IPv4 for odd ones, its own source port, DF set, no tags.
pub fn simple_flow(id: u8) -> FlowSpec {
    FlowSpec {
        v6: id.is_multiple_of(2),
        id,
        sport: 2000 + u16::from(id),
        dport: 80,
        isn: 1000 * u32::from(id),
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    }
}

/// Mergeable traffic only: 1..=3 flows (IPv4/IPv6, VLAN tags, either DF) of in-order segments
/// of one MSS (536..=1448 B; the last may be shorter), no PSH/FIN, window changes (which do not
/// stop merging), some inputs chained, flows interleaved, all in ONE burst; and an iMTU that
/// holds at least one segment. Every such flow must leave as iMTU-sized packets but its last.
pub fn full_mss_case() -> impl Strategy<Value = (Case, u16)> {
    (1usize..=3, 536usize..=1448, 1usize..=3)
        .prop_flat_map(|(n, mss, streams_max_k)| {
            let flows: Vec<_> = (0..n).map(|i| flow_strategy(i as u8 + 1, true)).collect();
            let streams: Vec<_> = (0..n)
                .map(|_| prop::collection::vec(any::<u8>(), 1..streams_max_k * 12_000))
                .collect();
            let imtu = prop_oneof![Just(9000u16), (mss as u16 + 72).max(1280)..=9000];
            (flows, streams, Just(mss), imtu, any::<u64>())
        })
        .prop_map(|(mut flows, streams, mss, imtu, seed)| {
            let mut rng = Rng::new(seed);
            let mut per_flow = Vec::new();
            for (fi, (flow, stream)) in flows.iter_mut().zip(&streams).enumerate() {
                flow.v6_ext = false; // never merged: not this property's traffic
                let mut hdr = SegHdr::of(flow, 1000);
                let mut ip_id = rng.next() as u16;
                let mut list = Vec::new();
                for (i, chunk) in stream.chunks(mss).enumerate() {
                    if rng.chance(100) {
                        hdr.window = rng.next() as u16;
                    }
                    let flags = SegFlags::default();
                    let mut inp = Input::data(flow, fi, i * mss, chunk, ip_id, hdr.clone(), flags);
                    if rng.chance(200) {
                        inp.chain = chain_points(&mut rng, &inp, header_len(flow, &inp.hdr));
                    }
                    list.push(inp);
                    ip_id = ip_id.wrapping_add(1);
                }
                per_flow.push(list);
            }
            let mut inputs = Vec::new();
            let mut cursors = vec![0usize; per_flow.len()];
            while let Some(f) = {
                let live: Vec<usize> = (0..per_flow.len())
                    .filter(|&f| cursors[f] < per_flow[f].len())
                    .collect();
                (!live.is_empty()).then(|| live[rng.below(live.len() as u64) as usize])
            } {
                inputs.push(per_flow[f][cursors[f]].clone());
                cursors[f] += 1;
            }
            let n = inputs.len();
            let case = Case {
                flows,
                streams,
                inputs,
                bursts: vec![(n, 0)],
            };
            (case, imtu)
        })
}

/// A configuration for [`full_mss_case`]: no evictions, no segment limit in the way.
pub fn roomy_config(imtu: u16, delay: bool) -> MergeConfig {
    MergeConfig {
        flow_capacity: 1024,
        max_segs: 256,
        ..config(imtu, delay)
    }
}

/// Plays the NIC's part on transmit for a packet that asked for offloads `o` (`None`: none):
/// fills the IPv4 header checksum from scratch, and the TCP one by summing the segment over
/// the pseudo-header sum the engine left in the field (TX checksum offload as DPDK defines
/// it), so a wrong seed shows as a bad checksum. With TSO the seed leaves out the length,
/// which the NIC adds for each piece it cuts; here it adds the whole packet's, so the packet
/// is checked whole (a seed with the length in it shows as a bad checksum too).
pub fn nic_tx_frame(mut f: Vec<u8>, o: Option<TxOffload>) -> Vec<u8> {
    use pxio::checksum::Sum;
    let Some(o) = o else {
        return f;
    };
    let l3 = usize::from(o.l2_len);
    let l4 = l3 + usize::from(o.l3_len);
    if o.ip_checksum {
        f[l3 + 10..l3 + 12].fill(0);
        let c = Sum::of(&f[l3..l4]).checksum();
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
    if o.tcp_checksum {
        let mut sum = Sum::of(&f[l4..]);
        if o.tso_segsz > 0 {
            sum = sum.add(Sum((f.len() - l4) as u32));
        }
        f[l4 + 16..l4 + 18].copy_from_slice(&sum.checksum().to_be_bytes());
    }
    f
}

/// The IP packets a NIC puts on the wire for one of `ip_len` bytes with `l34` bytes of IP and
/// TCP headers: that one, or past the iMTU (TSO) pieces of the iMTU and a last shorter one.
pub fn wire_sizes(ip_len: usize, l34: usize, imtu: usize) -> Vec<usize> {
    if ip_len <= imtu {
        return vec![ip_len];
    }
    let (payload, segsz) = (ip_len - l34, imtu - l34);
    let mut sizes = vec![imtu; payload / segsz];
    if payload % segsz > 0 {
        sizes.push(l34 + payload % segsz);
    }
    sizes
}

/// Every flow of a [`full_mss_case`] left as iMTU-sized packets, all but its last, and in as
/// few packets as its bytes need. A packet past the iMTU (TSO) counts as the pieces the NIC
/// cuts it into.
pub fn assert_imtu_bound(case: &Case, emitted: &[Emitted], imtu: u16) {
    for (fi, flow) in case.flows.iter().enumerate() {
        let sizes: Vec<usize> = emitted
            .iter()
            .filter(|e| e.flow == fi)
            .flat_map(|e| wire_sizes(e.ip_len, flow.l3_l4_len(), usize::from(imtu)))
            .collect();
        let per_packet = usize::from(imtu) - flow.l3_l4_len();
        let needed = case.streams[fi].len().div_ceil(per_packet);
        assert!(
            sizes[..sizes.len() - 1]
                .iter()
                .all(|&s| s == usize::from(imtu))
                && sizes.len() == needed,
            "flow {fi} ({}, VLAN {:?}, DF {}): {} B of in-order full segments in one burst left \
             as IP packets of {sizes:?} B; expected {needed} packet(s), all but the last of \
             exactly the iMTU {imtu}",
            if flow.v6 { "IPv6" } else { "IPv4" },
            flow.vlan,
            flow.df,
            case.streams[fi].len()
        );
    }
}
