//! Shared test machinery: real TCP/IPv4/IPv6 frames built with etherparse, random flows cut into
//! segments, perturbed like a network would, and a checker for what the engine emitted.

#![allow(dead_code)]

use std::collections::HashMap;

use etherparse::{InternetSlice, TransportSlice};
use etherparse::{IpHeaders, IpNumber, Ipv4Extensions, Ipv4Header, PacketBuilder, SlicedPacket};
use proptest::prelude::*;
use pxio::merge::{DelayConfig, MergeConfig, Merger};
use pxio::PacketBuf;

pub const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// TCP timestamps option (NOP NOP TS): the common case on the Internet; 12 B of options.
pub fn ts_option(tsval: u32) -> [u8; 12] {
    let mut o = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0];
    o[4..8].copy_from_slice(&tsval.to_be_bytes());
    o[8..12].copy_from_slice(&7u32.to_be_bytes());
    o
}

/// One TCP flow's static properties.
#[derive(Clone, Debug)]
pub struct FlowSpec {
    pub v6: bool,
    pub id: u8,
    pub sport: u16,
    pub dport: u16,
    pub isn: u32,
    pub ack: u32,
    pub df: bool,
    pub ttl: u8,
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
}

/// What kind of TCP segment to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegFlags {
    pub psh: bool,
    pub fin: bool,
    pub syn: bool,
    pub rst: bool,
}

/// Builds one Ethernet frame of `flow` carrying `payload` at `seq`.
pub fn tcp_frame(
    flow: &FlowSpec,
    seq: u32,
    ip_id: u16,
    tsval: u32,
    f: SegFlags,
    payload: &[u8],
) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(SRC_MAC, DST_MAC);
    let ip = if flow.v6 {
        eth.ipv6(flow.src_v6(), flow.dst_v6(), flow.ttl)
    } else {
        let mut h =
            Ipv4Header::new(0, flow.ttl, IpNumber::TCP, flow.src_v4(), flow.dst_v4()).unwrap();
        h.identification = ip_id;
        h.dont_fragment = flow.df;
        eth.ip(IpHeaders::Ipv4(h, Ipv4Extensions::default()))
    };
    let mut tcp = ip
        .tcp(flow.sport, flow.dport, seq, 65000)
        .ack(flow.ack)
        .options_raw(&ts_option(tsval))
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
    let mut out = Vec::with_capacity(tcp.size(payload.len()));
    tcp.write(&mut out, payload).unwrap();
    out
}

/// An input packet and what the checker needs to know about it.
#[derive(Clone, Debug)]
pub struct Input {
    pub frame: Vec<u8>,
    /// `Some(flow index)` for TCP data of a generated flow.
    pub flow: Option<usize>,
    /// Payload offset in the flow's stream and length.
    pub offset: usize,
    pub len: usize,
    pub flags: SegFlags,
    /// Junk that must come out untouched.
    pub junk: bool,
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

/// Parameters of the input perturbation.
#[derive(Clone, Debug)]
pub struct Knobs {
    pub max_flows: usize,
    pub max_stream: usize,
    pub max_seg: usize,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            max_flows: 4,
            max_stream: 24_000,
            max_seg: 1448,
        }
    }
}

fn flow_strategy(id: u8) -> impl Strategy<Value = FlowSpec> {
    (
        any::<bool>(),
        any::<u32>(),
        any::<u32>(),
        any::<bool>(),
        1u8..=255,
    )
        .prop_map(move |(v6, isn, ack, df, ttl)| FlowSpec {
            v6,
            id,
            sport: 40000 + u16::from(id),
            dport: 443,
            isn,
            ack,
            df,
            ttl,
        })
}

/// Random flows, streams, segmentation and perturbation.
pub fn case_strategy(knobs: Knobs) -> impl Strategy<Value = Case> {
    let Knobs {
        max_flows,
        max_stream,
        max_seg,
    } = knobs;
    (1..=max_flows)
        .prop_flat_map(move |n| {
            let flows: Vec<_> = (0..n).map(|i| flow_strategy(i as u8 + 1)).collect();
            let streams: Vec<_> = (0..n)
                .map(|_| prop::collection::vec(any::<u8>(), 1..max_stream))
                .collect();
            (flows, streams, any::<u64>())
        })
        .prop_map(move |(flows, streams, seed)| build_case(flows, streams, seed, max_seg))
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

pub fn build_case(flows: Vec<FlowSpec>, streams: Vec<Vec<u8>>, seed: u64, max_seg: usize) -> Case {
    let mut rng = Rng::new(seed);
    let mut per_flow: Vec<Vec<Input>> = Vec::new();
    for (fi, (flow, stream)) in flows.iter().zip(&streams).enumerate() {
        let mut list = Vec::new();
        let mut off = 0;
        let mut ip_id = rng.next() as u16;
        let mut tsval = 1000u32;
        while off < stream.len() {
            // Mostly full-sized segments, sometimes random sizes.
            let len = if rng.chance(700) {
                max_seg
            } else {
                1 + rng.below(max_seg as u64) as usize
            }
            .min(stream.len() - off);
            let last = off + len == stream.len();
            let flags = SegFlags {
                psh: rng.chance(40) || last,
                fin: last && rng.chance(500),
                ..SegFlags::default()
            };
            if rng.chance(20) {
                tsval += 1; // an option change: neighbours must not merge across it
            }
            let seq = flow.isn.wrapping_add(off as u32);
            list.push(Input {
                frame: tcp_frame(flow, seq, ip_id, tsval, flags, &stream[off..off + len]),
                flow: Some(fi),
                offset: off,
                len,
                flags,
                junk: false,
            });
            ip_id = ip_id.wrapping_add(1);
            off += len;
        }
        // A RST or SYN now and then, never merged (zero payload, so it carries no stream bytes).
        if rng.chance(200) {
            let flags = SegFlags {
                rst: rng.chance(500),
                syn: true,
                ..SegFlags::default()
            };
            let at = rng.below(list.len() as u64 + 1) as usize;
            list.insert(
                at,
                Input {
                    frame: tcp_frame(flow, flow.isn, 0, tsval, flags, &[]),
                    flow: Some(fi),
                    offset: 0,
                    len: 0,
                    flags,
                    junk: false,
                },
            );
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

/// Malformed or non-TCP frames that must pass through byte for byte.
fn junk(rng: &mut Rng) -> Input {
    let kind = rng.below(4);
    let frame = match kind {
        // Random bytes.
        0 => (0..rng.below(80)).map(|_| rng.next() as u8).collect(),
        // A TCP frame truncated inside its header.
        1 => {
            let f = FlowSpec {
                v6: false,
                id: 250,
                sport: 1,
                dport: 2,
                isn: 0,
                ack: 0,
                df: true,
                ttl: 64,
            };
            let full = tcp_frame(&f, 0, 0, 0, SegFlags::default(), b"abc");
            full[..30].to_vec()
        }
        // IPv4 with a total length longer than the frame.
        2 => {
            let f = FlowSpec {
                v6: false,
                id: 251,
                sport: 1,
                dport: 2,
                isn: 0,
                ack: 0,
                df: true,
                ttl: 64,
            };
            let mut full = tcp_frame(&f, 0, 0, 0, SegFlags::default(), b"abcdef");
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
        flow: None,
        offset: 0,
        len: 0,
        flags: SegFlags::default(),
        junk: true,
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
}

/// Checks everything a receiver would notice, and returns the emitted TCP packets by flow.
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
    // Per byte of each stream: delivered exactly as often as it arrived, with the right value.
    for (fi, flow) in case.flows.iter().enumerate() {
        let stream = &case.streams[fi];
        let mut arrived = vec![0u32; stream.len()];
        for inp in case.inputs.iter().filter(|i| i.flow == Some(fi)) {
            for c in &mut arrived[inp.offset..inp.offset + inp.len] {
                *c += 1;
            }
        }
        let mut delivered = vec![0u32; stream.len()];
        for e in emitted.iter().filter(|e| e.flow == fi) {
            let off = e.seq.wrapping_sub(flow.isn) as usize;
            assert!(
                off + e.payload.len() <= stream.len(),
                "bytes beyond the stream"
            );
            assert_eq!(
                &stream[off..off + e.payload.len()],
                &e.payload[..],
                "payload bytes differ at offset {off}"
            );
            for c in &mut delivered[off..off + e.payload.len()] {
                *c += 1;
            }
            if e.fin {
                assert_eq!(off + e.payload.len(), stream.len(), "FIN on the last byte");
            }
        }
        assert_eq!(
            arrived, delivered,
            "flow {fi}: every byte delivered as often as it arrived"
        );
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
                "PSH at stream offset {end} is on the last byte of an emitted packet"
            );
        }
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

/// Parses a frame of one of the case's flows, verifying IP and TCP checksums.
fn parse_ours(case: &Case, frame: &[u8]) -> Option<Emitted> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let (ip_len, flow) =
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
                (h.total_len() as usize, fi)
            }
            etherparse::NetSlice::Ipv6(ip) => {
                let h = ip.header();
                let fi = case.flows.iter().position(|f| {
                    f.v6 && f.src_v6() == h.source() && f.dst_v6() == h.destination()
                })?;
                (40 + h.payload_length() as usize, fi)
            }
            etherparse::NetSlice::Arp(_) => return None,
        };
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
    Some(Emitted {
        flow,
        seq: header.sequence_number,
        payload: payload.to_vec(),
        psh: header.psh,
        fin: header.fin,
        syn: header.syn,
        rst: header.rst,
        ip_len,
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

/// Feeds `case` to a merger and returns the emitted frames and the merger's final stats.
pub fn run<B: PacketBuf>(
    case: &Case,
    merger: &mut Merger<B>,
    make: impl Fn(&[u8]) -> B,
) -> Vec<Vec<u8>> {
    let times = arrival_times(case);
    let mut out = Vec::new();
    let mut frames = Vec::new();
    let mut start = 0;
    let mut now = 0;
    for &(end, _) in &case.bursts {
        now = times[start];
        merger.poll(now, &mut out);
        let burst: Vec<B> = case.inputs[start..end]
            .iter()
            .map(|i| make(&i.frame))
            .collect();
        merger.rx_burst(burst, now, &mut out);
        frames.extend(out.drain(..).map(|p| p.to_vec()));
        start = end;
    }
    // Polls at the window's end release everything that was delayed.
    merger.poll(now + MAX_WINDOW_NS, &mut out);
    assert_eq!(
        merger.stats().held_items,
        0,
        "poll released every delayed item"
    );
    merger.flush_all(now + MAX_WINDOW_NS, &mut out);
    frames.extend(out.drain(..).map(|p| p.to_vec()));
    frames
}
