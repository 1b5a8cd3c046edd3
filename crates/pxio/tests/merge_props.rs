//! Property tests: merging never corrupts a byte stream, keeps each flow's order, and merges
//! what may be merged (SIGCOMM'26 §4.1).
//!
//! Random TCP flows (IPv4 and IPv6, VLAN-tagged or not) are cut into segments of random sizes,
//! some chained, interleaved, reordered, duplicated, dropped and partially retransmitted with
//! different bytes, mixed with PSH/FIN, ACK, window, ECN and timestamp changes, IPv4 options,
//! IPv6 extension headers, SYN/RST and malformed frames, and fed in random bursts at random
//! simulated times. Whatever comes out must be what a receiver would accept (see
//! `common::check_outputs`): every copy of every byte as it arrived and in arrival order, each
//! flow's order kept against its held data, headers only merged where they match, nothing over
//! the iMTU, valid checksums, flags where they belong, nothing held too long, no buffer leaked.
//! And in-order full segments of a burst must leave as iMTU-sized packets.

mod common;

use common::{
    assert_imtu_bound, case_strategy, check_outputs, config, full_mss_case, roomy_config, run,
    Case, FlowSpec, Input, Knobs, SegFlags, SegHdr, MAX_POLL_GAP_NS, MAX_WINDOW_NS,
};
use proptest::prelude::*;
use pxio::merge::Merger;
use pxio::{HeapBuf, HeapPool, PacketBuf};

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn merging_never_corrupts_a_stream(
        case in case_strategy(Knobs::default()),
        // Inputs are at most 1528 B (IPv6 with an 8 B extension header, 1448 B payload); the
        // iMTU is at least that (the engine passes larger inputs through as they are: refusing
        // them is the gateway's inbound iMTU check).
        imtu in prop_oneof![Just(9000u16), 1528u16..=9000],
        delay in any::<bool>(),
        // Whole frames carry a NIC's checksum verdict (then trusted), or none (then the engine
        // verifies every segment itself).
        nic_verdicts in any::<bool>(),
    ) {
        let pool = HeapPool::new(256);
        {
            let mut merger = Merger::<HeapBuf>::new(config(imtu, delay), HeapPool::new(256)).unwrap();
            let frames = run(&case, &mut merger, |f| {
                let mut b = pool.packet(f);
                if nic_verdicts {
                    b.set_l4_csum_verdict(common::tcp_verdict(f).map(|v| v.2));
                }
                b
            });
            check_outputs(&case, &frames, usize::from(imtu));
            let s = merger.stats();
            prop_assert_eq!(s.packets_in as usize, case.inputs.len());
            prop_assert_eq!(s.packets_out as usize, frames.len());
            prop_assert!(s.max_hold_ns <= MAX_WINDOW_NS + MAX_POLL_GAP_NS,
                "held {} ns", s.max_hold_ns);
            prop_assert_eq!(merger.pool().in_use(), 0, "cut headers all returned");
        }
        prop_assert_eq!(pool.in_use(), 0, "every input segment freed once");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Merging happens where the input allows it: in-order full-MSS segments without PSH, in one
    /// burst, leave as iMTU-sized packets (all but each flow's last), whatever the IP version,
    /// VLAN tags, DF bit, window changes or input chaining.
    #[test]
    fn in_order_full_segments_of_a_burst_leave_imtu_sized(
        (case, imtu) in full_mss_case(),
        delay in any::<bool>(),
    ) {
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(roomy_config(imtu, delay), HeapPool::new(256)).unwrap();
        let frames = run(&case, &mut merger, |f| pool.packet(f));
        let emitted = check_outputs(&case, &frames, usize::from(imtu));
        assert_imtu_bound(&case, &emitted, imtu);
    }
}

#[test]
fn in_order_full_segments_become_imtu_packets() {
    // One IPv4 flow, 100 in-order 1448 B segments in one burst: every emitted packet but the
    // last is exactly 9000 B (cuts keep them at the iMTU), and the stream is intact.
    let flow = FlowSpec {
        v6: false,
        id: 1,
        sport: 1000,
        dport: 80,
        isn: u32::MAX - 5000, // the stream wraps the sequence space
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    };
    let stream: Vec<u8> = (0..100 * 1448).map(|i| (i * 7 % 251) as u8).collect();
    let inputs: Vec<Input> = stream
        .chunks(1448)
        .enumerate()
        .map(|(i, chunk)| {
            let hdr = SegHdr::of(&flow, 1);
            Input::data(
                &flow,
                0,
                i * 1448,
                chunk,
                i as u16,
                hdr,
                SegFlags::default(),
            )
        })
        .collect();
    let n = inputs.len();
    let case = Case {
        flows: vec![flow],
        streams: vec![stream],
        inputs,
        bursts: vec![(n, 0)],
    };
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let frames = run(&case, &mut merger, |f| pool.packet(f));
    let emitted = check_outputs(&case, &frames, 9000);
    let sizes: Vec<usize> = emitted.iter().map(|e| e.ip_len).collect();
    assert!(
        sizes[..sizes.len() - 1].iter().all(|&s| s == 9000),
        "{sizes:?}"
    );
    // 144800 B of payload in 8948 B pieces: 16 full packets and one of 1632 B.
    assert_eq!(sizes.len(), 17);
    assert_eq!(merger.stats().cuts, 16);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A segment corrupted in flight must still fail the receiver's checksum after merging, and
    /// corruption never reaches a packet whose checksum verifies.
    #[test]
    fn corruption_is_never_laundered(
        // Retransmissions carry other bytes than the stream: this check compares with the stream.
        case in case_strategy(Knobs { retransmissions: false, ..Knobs::default() }),
        pick in any::<usize>(),
        delay in any::<bool>(),
    ) {
        let mut case = case;
        let Some((flow, offset)) = common::corrupt_one(&mut case, pick) else {
            return Ok(());
        };
        let spec = case.flows[flow].clone();
        let src = if spec.v6 { spec.src_v6() } else {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&spec.src_v4());
            a
        };
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(config(9000, delay), HeapPool::new(256)).unwrap();
        let frames = run(&case, &mut merger, |f| pool.packet(f));
        let stream = &case.streams[flow];
        let mut corrupt_seen = 0;
        for frame in &frames {
            let Some((seq, payload, valid, from)) = common::tcp_verdict(frame) else { continue };
            if from != src {
                continue;
            }
            let start = seq.wrapping_sub(spec.isn) as usize;
            let wrong = payload.iter().enumerate().any(|(k, &b)| stream[start + k] != b);
            if wrong {
                corrupt_seen += 1;
                prop_assert!(!valid, "a packet carrying the corrupted byte at {} verifies", offset);
            }
        }
        // The corrupted segment is one of the inputs and the engine drops nothing: the flipped
        // byte reached the receiver, inside a packet that fails verification (checked above).
        prop_assert!(corrupt_seen >= 1, "the corrupted byte at {} was never delivered", offset);
    }
}

/// One in-order flow of full segments whose 7th segment — the one cut at the first 9000 B
/// boundary — is corrupted in flight: no part of it may reach a packet that verifies (it is
/// refused whole on arrival, never cut into halves).
#[test]
fn a_corrupt_segment_is_not_cut_into_valid_halves() {
    for corrupt_at in [0usize, 100, 259, 260, 1000, 1447] {
        let flow = FlowSpec {
            v6: false,
            id: 1,
            sport: 1000,
            dport: 80,
            isn: 7,
            ack: 1,
            df: true,
            ttl: 64,
            ..FlowSpec::default()
        };
        let stream: Vec<u8> = (0..12 * 1448).map(|i| (i * 13 % 251) as u8).collect();
        let mut inputs: Vec<Input> = stream
            .chunks(1448)
            .enumerate()
            .map(|(i, chunk)| {
                let hdr = SegHdr::of(&flow, 1);
                Input::data(
                    &flow,
                    0,
                    i * 1448,
                    chunk,
                    i as u16,
                    hdr,
                    SegFlags::default(),
                )
            })
            .collect();
        let frame = &mut inputs[6].frame;
        let at = frame.len() - 1448 + corrupt_at;
        frame[at] ^= 0xff;
        let n = inputs.len();
        let case = Case {
            flows: vec![flow],
            streams: vec![stream.clone()],
            inputs,
            bursts: vec![(n, 0)],
        };
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
        let frames = run(&case, &mut merger, |f| pool.packet(f));
        let mut bad = 0;
        for f in &frames {
            let (seq, payload, valid, _) = common::tcp_verdict(f).unwrap();
            let start = seq.wrapping_sub(7) as usize;
            let differs = payload
                .iter()
                .enumerate()
                .any(|(k, &b)| stream[start + k] != b);
            assert!(
                !(differs && valid),
                "corrupt byte {corrupt_at} in a valid packet"
            );
            bad += usize::from(!valid);
        }
        assert!(bad >= 1, "the corruption is detectable");
        assert_eq!(
            merger.stats().bad_checksum,
            1,
            "the corrupt segment was refused (and so never cut into halves)"
        );
    }
}

/// A flow's segment with an IPv6 extension header must not overtake the data the engine holds
/// for that flow ("every packet of a flow keeps its order relative to that flow's held data").
/// `classify` calls such a packet `OtherIp`; the engine reads its flow with `wire::flow_of` and
/// flushes the flow first.
#[test]
fn ipv6_extension_header_segments_keep_their_place() {
    let plain = FlowSpec {
        v6: true,
        id: 1,
        sport: 1000,
        dport: 80,
        isn: 1,
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    };
    let with_ext = FlowSpec {
        v6_ext: true,
        ..plain.clone()
    };
    let stream: Vec<u8> = (0..4 * 1000).map(|i| (i % 241) as u8).collect();
    let frames_in: Vec<Vec<u8>> = stream
        .chunks(1000)
        .enumerate()
        .map(|(i, chunk)| {
            let flow = if i == 3 { &with_ext } else { &plain };
            let hdr = SegHdr::of(flow, 1);
            Input::data(flow, 0, i * 1000, chunk, 0, hdr, SegFlags::default()).frame
        })
        .collect();
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let mut out = Vec::new();
    merger.rx_burst(frames_in.iter().map(|f| pool.packet(f)), 1_000, &mut out);
    let seqs: Vec<u32> = out
        .iter()
        .map(|p| common::tcp_verdict(&p.to_vec()).unwrap().0)
        .collect();
    assert_eq!(
        seqs,
        [1, 3001],
        "the first three segments (held, merged) leave before the fourth"
    );
}

/// Held `a[0,1000)` and `c[2000,3000)`; then `X[1000,2400)` and `Y[2400,3400)` arrive, both
/// overlapping `c` with other bytes. X starts where `a` ends, but must not be appended to it: it
/// overlaps `c`, so the flow is flushed and X passes through unmerged (and so does Y), and the
/// receiver sees every copy of bytes 2000..3000 in arrival order, `c`'s first.
#[test]
fn a_segment_overlapping_a_later_held_item_is_not_appended() {
    let flow = FlowSpec {
        v6: false,
        id: 1,
        sport: 1000,
        dport: 80,
        isn: 77,
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    };
    let stream: Vec<u8> = (0..3400).map(|i| (i % 239) as u8).collect();
    let changed = |range: std::ops::Range<usize>, x: u8| -> Vec<u8> {
        stream[range].iter().map(|b| b ^ x).collect()
    };
    let x_bytes = [&stream[1000..2000], &changed(2000..2400, 0xa5)[..]].concat();
    let y_bytes = [&changed(2400..3000, 0x5a)[..], &stream[3000..3400]].concat();
    let hdr = || SegHdr::of(&flow, 1);
    let seg = |offset, bytes: &[u8], id| {
        Input::data(&flow, 0, offset, bytes, id, hdr(), SegFlags::default())
    };
    let inputs = vec![
        seg(0, &stream[..1000], 1),
        seg(2000, &stream[2000..3000], 2),
        seg(1000, &x_bytes, 3),
        seg(2400, &y_bytes, 4),
    ];
    let (ranges, _) = one_burst(flow, stream, inputs, 9000);
    assert_eq!(
        ranges,
        [(0, 1000), (2000, 1000), (1000, 1400), (2400, 1000)],
        "a and c leave first, then X and Y unmerged"
    );
}

/// Runs `inputs` of `flow` (whose bytes are `stream`) through a merger at `imtu`, delay off, as
/// one burst, checks what comes out as a receiver would (`check_outputs`), and returns each
/// output's payload range (start relative to the flow's ISN, length) and the merger's cuts.
fn one_burst(
    flow: FlowSpec,
    stream: Vec<u8>,
    inputs: Vec<Input>,
    imtu: u16,
) -> (Vec<(u32, usize)>, u64) {
    let isn = flow.isn;
    let case = Case {
        flows: vec![flow],
        streams: vec![stream],
        bursts: vec![(inputs.len(), 0)],
        inputs,
    };
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(imtu, false), HeapPool::new(256)).unwrap();
    let frames = run(&case, &mut merger, |f| pool.packet(f));
    let ranges = check_outputs(&case, &frames, usize::from(imtu))
        .iter()
        .map(|e| (e.seq.wrapping_sub(isn), e.payload.len()))
        .collect();
    (ranges, merger.stats().cuts)
}

/// Held `a` (whole 1000 B segments, one fewer than the iMTU holds) and `c`, which starts 1500 B
/// after `a` ends; then `X`, the 1500 B between them, arrives. It continues `a` but overshoots
/// the iMTU, so it is cut: its first part fills `a`, which leaves, and its rest (ending where
/// `c` starts) touches `c` and must be joined with it (gap-fill), not sent as a runt beside it:
/// two packets leave, not three. IPv4 and IPv6, at iMTUs of 4000 and 9000 B.
#[test]
fn a_cuts_rest_is_joined_with_the_held_item_it_touches() {
    for (id, imtu) in [(1, 9000), (2, 9000), (1, 4000), (2, 4000)] {
        let flow = common::simple_flow(id);
        let a_len = (usize::from(imtu) / 1000 - 1) * 1000;
        let total = a_len + 2000;
        let stream: Vec<u8> = (0..total).map(|i| (i % 241) as u8).collect();
        let seg = |offset: usize, len: usize, id| {
            let bytes = &stream[offset..offset + len];
            let hdr = SegHdr::of(&flow, 1);
            Input::data(&flow, 0, offset, bytes, id, hdr, SegFlags::default())
        };
        let mut inputs: Vec<Input> = (0..a_len / 1000)
            .map(|i| seg(i * 1000, 1000, i as u16))
            .collect();
        inputs.push(seg(a_len + 1500, 500, 100));
        inputs.push(seg(a_len, 1500, 101));
        let (ranges, cuts) = one_burst(flow.clone(), stream, inputs, imtu);
        let what = format!("v6 {} iMTU {imtu}: {ranges:?}", flow.v6);
        let first = ranges.first().map_or(0, |r| r.1);
        assert!(first > a_len, "X was cut into `a`: {what}");
        assert_eq!(
            ranges,
            [(0, first), (first as u32, total - first)],
            "`a` filled to the iMTU, then the rest of X joined with `c`: {what}"
        );
        assert_eq!(cuts, 1, "{what}");
    }
}

/// IPv6 segments whose flow labels differ are not merged, as in Linux GRO (`ipv6_gro_receive`
/// compares version and flow label): a new label (Linux picks one on a retransmission timeout,
/// to move the flow to another path) starts a new packet, and each packet carries its own.
#[test]
fn ipv6_segments_with_different_flow_labels_are_not_merged() {
    let flow = FlowSpec {
        v6: true,
        id: 1,
        sport: 1000,
        dport: 80,
        isn: 1,
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    };
    let stream: Vec<u8> = (0..6 * 1000).map(|i| (i % 241) as u8).collect();
    let inputs: Vec<Input> = stream
        .chunks(1000)
        .enumerate()
        .map(|(i, chunk)| {
            let hdr = SegHdr {
                flow_label: if i < 3 { 5 } else { 0x9_0009 },
                ..SegHdr::of(&flow, 1)
            };
            Input::data(&flow, 0, i * 1000, chunk, 0, hdr, SegFlags::default())
        })
        .collect();
    let case = Case {
        flows: vec![flow],
        streams: vec![stream],
        bursts: vec![(inputs.len(), 0)],
        inputs,
    };
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let frames = run(&case, &mut merger, |f| pool.packet(f));
    let emitted = check_outputs(&case, &frames, 9000);
    let got: Vec<(u32, usize, u32)> = emitted
        .iter()
        .map(|e| (e.seq, e.payload.len(), e.hdr.flow_label))
        .collect();
    assert_eq!(got, [(1, 3000, 5), (3001, 3000, 0x9_0009)]);
}

/// A merged packet carries the window of the segment holding its last byte: the most recent
/// advertisement, which is what the receiver's send window would be after taking the segments
/// one by one (RFC 9293 §3.10.7.4: under one ACK, the segment with the highest sequence number
/// updates it last). Also when the segments arrived out of order and were prepended.
#[test]
fn a_merged_packet_carries_its_last_segments_window() {
    let flow = FlowSpec {
        v6: false,
        id: 1,
        sport: 1000,
        dport: 80,
        isn: 1,
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    };
    let stream: Vec<u8> = (0..3 * 1000).map(|i| (i % 241) as u8).collect();
    let seg = |i: usize| {
        let hdr = SegHdr {
            window: 1000 * (i as u16 + 1),
            ..SegHdr::of(&flow, 1)
        };
        let chunk = &stream[i * 1000..(i + 1) * 1000];
        Input::data(&flow, 0, i * 1000, chunk, 0, hdr, SegFlags::default())
    };
    for order in [[0, 1, 2], [1, 2, 0], [2, 0, 1]] {
        let inputs: Vec<Input> = order.iter().map(|&i| seg(i)).collect();
        let case = Case {
            flows: vec![flow.clone()],
            streams: vec![stream.clone()],
            bursts: vec![(3, 0)],
            inputs,
        };
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
        let frames = run(&case, &mut merger, |f| pool.packet(f));
        let emitted = check_outputs(&case, &frames, 9000);
        let got: Vec<(u32, usize, u16)> = emitted
            .iter()
            .map(|e| (e.seq, e.payload.len(), e.hdr.window))
            .collect();
        assert_eq!(got, [(1, 3000, 3000)], "arrival order {order:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// A parse handed in with each packet (`rx_burst_parsed`, as pxgw's pipeline does with
    /// `rx_parsed`) gives exactly what the engine's own parse gives; so does a single-packet
    /// `rx_parsed` whose parse does not fit the packet (made from another frame of another
    /// length: the engine parses again), and the stream stays intact either way.
    #[test]
    fn a_parse_handed_in_merges_as_the_engines_own(
        case in case_strategy(Knobs::default()),
        delay in any::<bool>(),
    ) {
        use pxio::wire::Parsed;
        let pool = HeapPool::new(256);
        let make = |i: &Input| common::assemble(i, &|f: &[u8]| pool.packet(f));
        let mut own = Merger::<HeapBuf>::with_hash_seed(config(4000, delay), HeapPool::new(256), 1).unwrap();
        let expected = run(&case, &mut own, |f| pool.packet(f));
        let mut handed = Merger::<HeapBuf>::with_hash_seed(config(4000, delay), HeapPool::new(256), 1).unwrap();
        let mut single = Merger::<HeapBuf>::with_hash_seed(config(4000, delay), HeapPool::new(256), 1).unwrap();
        let (frames_h, frames_s) = burst_vs_one_by_one(&case, &mut handed, &mut single, &make, |m, inputs, now, out| {
            let burst: Vec<(HeapBuf, Parsed)> = inputs
                .iter()
                .map(|i| {
                    let b = make(i);
                    let p = Parsed::of(b.head(), b.len());
                    (b, p)
                })
                .collect();
            m.rx_burst_parsed(burst, now, out);
        });
        let (frames_h, frames_s) = (to_frames(frames_h), to_frames(frames_s));
        check_outputs(&case, &frames_h, 4000);
        check_outputs(&case, &frames_s, 4000);
        // The same packets (`check_outputs` checked each flow's order; the burst path may
        // interleave flows differently from the one-by-one path, never a flow's own packets).
        prop_assert_eq!(common::multiset(frames_h), common::multiset(expected.clone()));
        prop_assert_eq!(common::multiset(frames_s), common::multiset(expected));
        // And the same counters and delays: the burst path's shortcuts (a lone segment of an
        // idle flow leaves at once) count exactly what the one-by-one path counts.
        prop_assert_eq!(counters(&own), counters(&single));
        prop_assert_eq!(counters(&handed), counters(&single));
        prop_assert_eq!(pool.in_use(), 0);
    }
}

/// Runs `case` through `burst`, each RX burst at once by `feed`, and through `single`, one
/// packet at a time (each made by `make`) with a parse that never fits (so it parses each
/// packet itself), each engine polled at its own deadlines after the last burst; returns both
/// engines' outputs.
fn burst_vs_one_by_one(
    case: &Case,
    burst: &mut Merger<HeapBuf>,
    single: &mut Merger<HeapBuf>,
    make: &impl Fn(&Input) -> HeapBuf,
    mut feed: impl FnMut(&mut Merger<HeapBuf>, &[Input], u64, &mut Vec<HeapBuf>),
) -> (Vec<HeapBuf>, Vec<HeapBuf>) {
    let stale = pxio::wire::Parsed::of(&[0u8; 61], 61);
    let times = common::arrival_times(case);
    let (mut out_b, mut out_s) = (Vec::new(), Vec::new());
    let (mut frames_b, mut frames_s) = (Vec::new(), Vec::new());
    let (mut start, mut now) = (0, 0);
    for &(end, _) in &case.bursts {
        now = times[start];
        burst.poll(now, &mut out_b);
        single.poll(now, &mut out_s);
        feed(burst, &case.inputs[start..end], now, &mut out_b);
        for i in &case.inputs[start..end] {
            single.rx_parsed(make(i), stale, now, &mut out_s);
        }
        single.settle(now, &mut out_s);
        frames_b.append(&mut out_b);
        frames_s.append(&mut out_s);
        start = end;
    }
    for (m, out, frames) in [
        (burst, &mut out_b, &mut frames_b),
        (single, &mut out_s, &mut frames_s),
    ] {
        let mut t = now;
        while let Some(due) = m.next_deadline() {
            t = t.max(due);
            m.poll(t, out);
        }
        m.flush_all(t, out);
        frames.append(out);
    }
    (frames_b, frames_s)
}

/// An RSS hash as a NIC gives it, the same for every packet of a flow: none (`kind` 0), one
/// per flow (1), one for all packets (2), or two shared by all flows (3). Junk gets one too.
fn consistent_rss(kind: u8, i: &Input) -> Option<u32> {
    let f = i.flow.map_or(99, |f| f as u32);
    match kind {
        0 => None,
        1 => Some((f + 1).wrapping_mul(0x9e37_79b9)),
        2 => Some(0x5eed),
        _ => Some(f % 2),
    }
}

/// The bytes of each packet (the packets are freed).
fn to_frames(pkts: Vec<HeapBuf>) -> Vec<Vec<u8>> {
    pkts.iter().map(|b| b.to_vec()).collect()
}

/// Everything an engine counts, delays included: two engines that decided alike agree on all.
#[allow(clippy::type_complexity)]
fn counters(
    m: &Merger<HeapBuf>,
) -> (
    (u64, u64, u64, u64, u64, u64),
    (u64, u64, u64),
    (u64, u64, u64, u64),
) {
    let s = m.stats();
    (
        (
            s.packets_in,
            s.packets_out,
            s.payload_in,
            s.payload_full,
            s.merges,
            s.cuts,
        ),
        (s.passthrough, s.bad_checksum, s.bad_ip_checksum),
        (
            s.delay_ns.len(),
            s.delay_ns.max(),
            s.delay_ns.mean().to_bits(),
            s.max_hold_ns,
        ),
    )
}

/// Plays the NIC's part on transmit: fills the checksums the engine asked for (TX checksum
/// offload as DPDK defines it: the IPv4 header's from scratch, the TCP one by summing the
/// segment over the pseudo-header sum the engine left in the field), so a wrong seed shows
/// as a bad checksum.
fn nic_tx(b: &HeapBuf) -> Vec<u8> {
    common::nic_tx_frame(b.to_vec(), b.requested_tx_offload())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The run path (`merge::run`: a segment that continues its flow's only item, with the
    /// NIC's checksum verdicts, joins it after one masked header compare) and the fast path
    /// (`merge::fast`: the same test, before any parse, on the flow the NIC's RSS hash points
    /// to) decide exactly as the general path: `rx_burst` on frames with the verdicts gives
    /// the same packets, counters and delays as one-by-one `rx_parsed` on the same frames
    /// without them (which never takes either); and once the NIC has filled the checksums it
    /// was asked to (with TX offload; without it the engine computes them from the segments'
    /// claimed sums), every stream is intact. RSS hashes: none (the grouped path), one per
    /// flow, one for every packet (each flow's segments find another flow's item), or two
    /// shared by all flows. Taking each chunk one packet at a time (`begin_stream`) decides
    /// the same.
    #[test]
    fn the_run_path_merges_as_the_general_path(
        case in case_strategy(Knobs::default()),
        delay in any::<bool>(),
        offload in any::<bool>(),
        rss in 0u8..4,
    ) {
        use pxio::merge::MergeConfig;
        let cfg = MergeConfig { checksum_offload: offload, ..config(4000, delay) };
        let pool = HeapPool::new(256);
        let make = |i: &Input| common::nic_packet(&pool, i, consistent_rss(rss, i));
        // The reference gets the same frames without the verdicts, so it never takes the run
        // path (and verifies every checksum itself: the case's frames are all intact).
        let plain = |i: &Input| common::assemble(i, &|f: &[u8]| pool.packet(f));
        let mut burst = Merger::<HeapBuf>::with_hash_seed(cfg.clone(), HeapPool::new(256), 1).unwrap();
        let mut single = Merger::<HeapBuf>::with_hash_seed(cfg.clone(), HeapPool::new(256), 1).unwrap();
        let (frames_b, frames_s) = burst_vs_one_by_one(&case, &mut burst, &mut single, &plain, |m, inputs, now, out| {
            m.rx_burst(inputs.iter().map(&make), now, out);
        });
        // And a caller that takes each chunk one packet at a time, as pxgw's pipeline does
        // (`begin_stream`, each packet offered to the fast path, the ones it refuses parsed by
        // the caller and handed to the general path at once, `end_stream`, `settle`), merges
        // exactly as `rx_burst` does; the flow the fast path names for a segment it took is
        // that segment's own.
        let mut streamed = Merger::<HeapBuf>::with_hash_seed(cfg.clone(), HeapPool::new(256), 1).unwrap();
        let mut reference = Merger::<HeapBuf>::with_hash_seed(cfg, HeapPool::new(256), 1).unwrap();
        let mut wrong_flow = 0;
        let (frames_st, _) = burst_vs_one_by_one(&case, &mut streamed, &mut reference, &plain, |m, inputs, now, out| {
            wrong_flow += stream_chunk(m, inputs.iter().map(&make).collect(), now, out);
        });
        prop_assert_eq!(wrong_flow, 0);
        let on_wire: Vec<Vec<u8>> = frames_b.iter().map(nic_tx).collect();
        let frames_b = common::multiset(to_frames(frames_b));
        prop_assert_eq!(&frames_b, &common::multiset(to_frames(frames_s)));
        prop_assert_eq!(&frames_b, &common::multiset(to_frames(frames_st)));
        prop_assert_eq!(counters(&burst), counters(&single));
        prop_assert_eq!(counters(&streamed), counters(&single));
        prop_assert_eq!(single.stats().run_merges, 0);
        check_outputs(&case, &on_wire, 4000);
        prop_assert_eq!(pool.in_use(), 0);
    }
}

/// Merges one RX burst's `chunk` one packet at a time, as pxgw's pipeline does: offered to the
/// fast path, else parsed here and handed to the general path (or whole, grouped, when the
/// engine says so); then settles. Returns how many segments the fast path took for a flow
/// that is not theirs.
fn stream_chunk(
    m: &mut Merger<HeapBuf>,
    chunk: Vec<HeapBuf>,
    now: u64,
    out: &mut Vec<HeapBuf>,
) -> usize {
    use pxio::wire::{Class, Parsed};
    if !m.begin_stream(&chunk) {
        let parsed = chunk.into_iter().map(|b| {
            let p = Parsed::of(b.head(), b.len());
            (b, p)
        });
        m.rx_burst_parsed(parsed, now, out);
        return 0;
    }
    // The hints name each run of one flow entry once (a caller prefetches its own state by
    // them), never "none".
    let hints: Vec<u32> = m.stream_hints().collect();
    assert!(hints.windows(2).all(|w| w[0] != w[1]), "{hints:?}");
    assert!(
        hints.iter().all(|&h| (h as usize) < m.flow_capacity()),
        "{hints:?}"
    );
    let mut wrong_flow = 0;
    for (i, pkt) in chunk.into_iter().enumerate() {
        let own = match Parsed::of(pkt.head(), pkt.len()).class() {
            Class::Tcp(h) => Some(h.key),
            _ => None,
        };
        match m.offer_fast(i, pkt, now, out) {
            Ok(flow) => wrong_flow += usize::from(m.flow_key(flow).copied() != own),
            Err(pkt) => {
                let p = Parsed::of(pkt.head(), pkt.len());
                m.rx_streamed(i, pkt, &p, now, out);
            }
        }
    }
    m.end_stream();
    m.settle(now, out);
    wrong_flow
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The fast path only ever takes the RSS hash as a hint: a NIC whose hash changes within
    /// a flow, collides across flows or is missing on some packets may cost merges (a segment
    /// taken for the last of its flow in its burst leaves at once), never a byte, an order, a
    /// merge rule or a buffer.
    #[test]
    fn rss_hashes_that_change_within_a_flow_never_break_a_stream(
        case in case_strategy(Knobs::default()),
        delay in any::<bool>(),
        seed in any::<u32>(),
    ) {
        use pxio::merge::MergeConfig;
        let cfg = MergeConfig { checksum_offload: true, ..config(4000, delay) };
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
        let on_wire = common::run_with(&case, &mut merger, |k, i| {
            // Eight values, one of them "no hash", drawn per packet.
            let h = (seed ^ k as u32).wrapping_mul(0x9e37_79b9) >> 29;
            common::nic_packet(&pool, i, (h != 0).then_some(h))
        }, |p| nic_tx(&p));
        let s = merger.stats();
        prop_assert_eq!(s.packets_in, case.inputs.len() as u64);
        prop_assert_eq!(s.packets_out, on_wire.len() as u64);
        prop_assert_eq!(s.held_items, 0);
        check_outputs(&case, &on_wire, 4000);
        prop_assert_eq!(pool.in_use(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// In-order full segments with the NIC's verdicts and checksum offload join their items on
    /// the run path: every merge but the cut ones, those of chained inputs (the run path leaves
    /// them to the general one) and each flow's first in each burst, into iMTU-bound packets whose checksums verify once the
    /// NIC has filled them.
    #[test]
    fn in_order_segments_with_the_nics_verdicts_take_the_run_path(
        (case, imtu) in full_mss_case(),
        delay in any::<bool>(),
        rss in 0u8..4,
    ) {
        use pxio::merge::MergeConfig;
        let cfg = MergeConfig { checksum_offload: true, ..roomy_config(imtu, delay) };
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
        let on_wire = common::run_with(
            &case,
            &mut merger,
            |_, i| common::nic_packet(&pool, i, consistent_rss(rss, i)),
            |p| nic_tx(&p),
        );
        let s = merger.stats();
        // What the general path takes: a chained input, and the first segment of each flow in
        // each burst (it may join an item held from an earlier burst).
        let chained = case.inputs.iter().filter(|i| !i.chain.is_empty()).count() as u64;
        let mut firsts = 0u64;
        let mut at = 0;
        for &(end, _) in &case.bursts {
            let flows: std::collections::HashSet<_> =
                case.inputs[at..end].iter().map(|i| i.flow).collect();
            firsts += flows.len() as u64;
            at = end;
        }
        prop_assert!(s.run_merges <= s.merges);
        // Without RSS hashes no chunk takes the fast path; with them a chunk may still be
        // grouped (after one where few segments continued an item), so only the bound holds.
        prop_assert!(s.fast_merges <= s.run_merges);
        if rss == 0 {
            prop_assert_eq!(s.fast_merges, 0);
        }
        // (When flows share a hash, each one's segments find the other's item in the fast
        // index and take the general path one by one: that bound is for distinct hashes.)
        prop_assert!(
            rss >= 2 || s.run_merges + s.cuts + chained + firsts >= s.merges,
            "run {} cuts {} chained {} firsts {} merges {}",
            s.run_merges, s.cuts, chained, firsts, s.merges
        );
        let emitted = check_outputs(&case, &on_wire, usize::from(imtu));
        assert_imtu_bound(&case, &emitted, imtu);
        prop_assert_eq!(pool.in_use(), 0);
    }
}
