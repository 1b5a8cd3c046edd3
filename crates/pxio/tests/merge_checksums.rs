//! What the receiver would reject stays rejected: a segment whose IPv4 header or TCP checksum does
//! not verify is never merged; it passes through untouched, after its flow's held data, so the
//! receiver drops it and nothing else; the flow's other segments still merge.

mod common;

use common::{
    case_strategy, config, run, tcp_verdict, Case, FlowSpec, Input, Knobs, SegFlags, SegHdr,
};
use proptest::prelude::*;
use pxio::merge::Merger;
use pxio::{HeapBuf, HeapPool};

fn flow() -> FlowSpec {
    FlowSpec {
        v6: false,
        id: 1,
        sport: 1000,
        dport: 80,
        isn: 7,
        ack: 1,
        df: true,
        ttl: 64,
        ..FlowSpec::default()
    }
}

/// `n` in-order segments of `len` bytes of one flow, all in one burst.
fn in_order(flow: &FlowSpec, n: usize, len: usize) -> Case {
    // Not periodic: no segment's bytes appear elsewhere in the stream.
    let mut rng = common::Rng::new(0x5eed);
    let stream: Vec<u8> = (0..n * len).map(|_| rng.next() as u8).collect();
    let inputs: Vec<Input> = stream
        .chunks(len)
        .enumerate()
        .map(|(i, chunk)| {
            let hdr = SegHdr::of(flow, 1);
            Input::data(flow, 0, i * len, chunk, i as u16, hdr, SegFlags::default())
        })
        .collect();
    Case {
        flows: vec![flow.clone()],
        streams: vec![stream],
        bursts: vec![(inputs.len(), 0)],
        inputs,
    }
}

/// Runs `case` through a fresh merger (software checksums); returns the emitted frames and
/// the merger.
fn merge(case: &Case) -> (Vec<Vec<u8>>, Merger<HeapBuf>) {
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let frames = run(case, &mut merger, |f| pool.packet(f));
    (frames, merger)
}

/// Payload bytes of emitted packets that fail the receiver's TCP checksum, and whether any
/// packet that passes it carries a byte that differs from the stream.
fn receiver_view(case: &Case, frames: &[Vec<u8>]) -> (usize, bool) {
    let (stream, isn) = (&case.streams[0], case.flows[0].isn);
    let (mut rejected, mut accepted_corruption) = (0, false);
    for f in frames {
        let (seq, payload, valid, _) = tcp_verdict(f).expect("TCP");
        if !valid {
            rejected += payload.len();
            continue;
        }
        let start = seq.wrapping_sub(isn) as usize;
        accepted_corruption |= payload
            .iter()
            .enumerate()
            .any(|(k, &b)| stream[start + k] != b);
    }
    (rejected, accepted_corruption)
}

/// Two segments corrupted in flight so that their errors cancel in the ones'-complement sum: +1
/// in one 16-bit column of the first, −1 in the same column of the second. Each fails its own
/// checksum; merged, they must not make a packet that verifies.
#[test]
fn cancelling_corruptions_do_not_make_a_packet_that_verifies() {
    let f = flow();
    let mut case = in_order(&f, 6, 1000);
    let payload_at = |inp: &Input| inp.frame.len() - inp.len;
    // Segments 1 and 2 (1000 B each: the columns line up when merged); byte 11 of a payload is
    // the low byte of its sixth 16-bit word.
    for (i, delta) in [(1usize, 1i16), (2, -1)] {
        let inp = &mut case.inputs[i];
        let at = payload_at(inp) + 10;
        let word = u16::from_be_bytes([inp.frame[at], inp.frame[at + 1]]);
        let word = word.wrapping_add_signed(delta);
        inp.frame[at..at + 2].copy_from_slice(&word.to_be_bytes());
    }
    for i in [1, 2] {
        let (_, _, valid, _) = tcp_verdict(&case.inputs[i].frame).unwrap();
        assert!(!valid, "segment {i} alone fails its checksum");
    }
    let (frames, merger) = merge(&case);
    let (rejected, accepted_corruption) = receiver_view(&case, &frames);
    assert!(
        !accepted_corruption,
        "a packet carrying the corrupted bytes verifies at the receiver"
    );
    assert_eq!(
        rejected, 2000,
        "exactly the two corrupted segments are rejected"
    );
    for i in [1, 2] {
        assert!(
            frames.contains(&case.inputs[i].frame),
            "corrupted segment {i} passes through untouched"
        );
    }
    assert_eq!(merger.stats().bad_checksum, 2);
}

/// A segment whose IPv4 header checksum is wrong is dropped by the receiver's IP layer: it must
/// not be merged (the merged packet would get a fresh, valid header checksum); it passes
/// through untouched, and is counted.
#[test]
fn a_bad_ipv4_header_checksum_is_never_merged() {
    let f = flow();
    for bad in [0usize, 2, 5] {
        let mut case = in_order(&f, 6, 1000);
        // The IPv4 header checksum field: after 14 B of Ethernet, at offset 10 of the header.
        case.inputs[bad].frame[14 + 10] ^= 0x40;
        let bad_frame = case.inputs[bad].frame.clone();
        let (frames, merger) = merge(&case);
        let bad_payload = &case.inputs[bad].payload;
        for frame in &frames {
            if *frame == bad_frame {
                continue;
            }
            let (_, payload, _, _) = tcp_verdict(frame).unwrap();
            assert!(
                !payload
                    .windows(bad_payload.len())
                    .any(|w| w == &bad_payload[..]),
                "segment {bad}, with a bad IPv4 header checksum, was merged into a packet of {} B",
                payload.len()
            );
        }
        assert_eq!(
            frames.iter().filter(|f| **f == bad_frame).count(),
            1,
            "segment {bad} passes through untouched"
        );
        assert_eq!(merger.stats().bad_ip_checksum, 1, "segment {bad} counted");
    }
}

/// One bad segment costs at most itself: the receiver rejects exactly its bytes, and the flow's
/// other segments still merge into iMTU-sized packets.
#[test]
fn a_corrupt_segment_costs_only_itself() {
    let f = flow();
    for bad in [0usize, 3, 10, 29] {
        let mut case = in_order(&f, 30, 1448);
        let at = case.inputs[bad].frame.len() - 700;
        case.inputs[bad].frame[at] ^= 0x01;
        let (frames, merger) = merge(&case);
        let (rejected, accepted_corruption) = receiver_view(&case, &frames);
        assert!(!accepted_corruption);
        assert_eq!(
            rejected, 1448,
            "segment {bad}: the receiver loses exactly the corrupted segment"
        );
        // 29 good segments (41992 B): at most two partly filled packets, one on each side of
        // the bad segment; the rest leave iMTU-sized.
        let full = frames.iter().filter(|f| f.len() == 14 + 9000).count();
        assert!(
            full >= 41992 / 8948 - 1,
            "segment {bad}: only {full} full packets"
        );
        assert_eq!(merger.stats().bad_checksum, 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Whatever the traffic, the bytes of a segment corrupted in flight never reach a merged
    /// packet: it leaves exactly as it came, and it is the only packet the receiver rejects;
    /// whether the engine verifies checksums itself or trusts the NIC's verdict.
    #[test]
    fn bytes_of_a_corrupted_segment_never_reach_a_merged_packet(
        case in case_strategy(Knobs::default()),
        pick in any::<usize>(),
        delay in any::<bool>(),
        nic in any::<bool>(),
    ) {
        let mut case = case;
        let Some((fi, _)) = common::corrupt_one(&mut case, pick) else {
            return Ok(());
        };
        let corrupted: Vec<&Input> = case
            .inputs
            .iter()
            .filter(|i| i.flow == Some(fi) && tcp_verdict(&i.frame).is_some_and(|v| !v.2))
            .collect();
        prop_assert_eq!(corrupted.len(), 1);
        let bad_frame = corrupted[0].frame.clone();
        let c = corrupted[0].clone();
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(config(9000, delay), HeapPool::new(256)).unwrap();
        // With `nic`, each whole frame carries the verdict a NIC would give (the parts of a
        // chained input carry none: the engine checks those itself).
        let frames = run(&case, &mut merger, |f| {
            let mut b = pool.packet(f);
            if nic {
                b.set_l4_csum_verdict(tcp_verdict(f).map(|v| v.2));
            }
            b
        });
        let ours = |f: &Vec<u8>| {
            let (_, _, valid, src) = tcp_verdict(f)?;
            let known = case.flows.iter().any(|fl| {
                let mut a = [0u8; 16];
                if fl.v6 { a = fl.src_v6() } else { a[..4].copy_from_slice(&fl.src_v4()) }
                a == src
            });
            known.then_some(valid)
        };
        let rejected: Vec<&Vec<u8>> = frames.iter().filter(|f| ours(f) == Some(false)).collect();
        prop_assert_eq!(rejected.len(), 1, "one packet fails the receiver's checksum");
        prop_assert!(*rejected[0] == bad_frame, "and it is the corrupted segment, untouched");
        // Counted when it was a segment the engine would otherwise have merged (not one with
        // IPv4 options or IPv6 extension headers, which pass through unverified anyway).
        let mergeable = !case.flows[fi].v6_ext && !c.hdr.ip_opts;
        prop_assert_eq!(merger.stats().bad_checksum, u64::from(mergeable));
    }
}

/// The NIC's verdict is trusted both ways: a segment it calls bad is never merged (it passes
/// through untouched and is counted), and segments it calls good merge without the payload
/// being read, into packets whose checksums verify.
#[test]
fn the_nics_verdict_is_trusted() {
    let f = flow();
    let case = in_order(&f, 6, 1000);
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let frames = run(&case, &mut merger, |bytes| {
        let mut b = pool.packet(bytes);
        // The third segment is intact, but the NIC says its checksum is wrong.
        let third = bytes == case.inputs[2].frame.as_slice();
        b.set_l4_csum_verdict(Some(!third));
        b
    });
    let seqs: Vec<(u32, usize, bool)> = frames
        .iter()
        .map(|fr| {
            let (seq, payload, valid, _) = tcp_verdict(fr).unwrap();
            (seq - f.isn, payload.len(), valid)
        })
        .collect();
    assert_eq!(
        seqs,
        [(0, 2000, true), (2000, 1000, true), (3000, 3000, true)],
        "the segment the NIC calls bad leaves alone, between the merged ones"
    );
    assert!(frames.contains(&case.inputs[2].frame), "untouched");
    assert_eq!(merger.stats().bad_checksum, 1);
}

/// The NIC's IPv4 header checksum verdict is trusted both ways, like its TCP verdict: a segment
/// it calls bad is never merged (it passes untouched and is counted), even with intact bytes; a
/// segment it calls good is not summed again, and the merged packet leaves with a fresh header
/// checksum of its own that verifies.
#[test]
fn the_nics_ip_header_verdict_is_trusted() {
    let f = flow();
    let mut case = in_order(&f, 6, 1000);
    // Segment 4's header checksum is wrong, but the NIC calls it good: it is trusted.
    case.inputs[4].frame[14 + 10] ^= 0x40;
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let frames = run(&case, &mut merger, |bytes| {
        let mut b = pool.packet(bytes);
        // The second segment's header is intact, but the NIC says its checksum is wrong.
        let second = bytes == case.inputs[1].frame.as_slice();
        b.set_ip_csum_verdict(Some(!second));
        b.set_l4_csum_verdict(Some(true));
        b
    });
    let seqs: Vec<(u32, usize)> = frames
        .iter()
        .map(|fr| {
            let (seq, payload, _, _) = tcp_verdict(fr).unwrap();
            (seq - f.isn, payload.len())
        })
        .collect();
    assert_eq!(
        seqs,
        [(0, 1000), (1000, 1000), (2000, 4000)],
        "the segment the NIC calls bad leaves alone, the others merge around it"
    );
    assert!(frames.contains(&case.inputs[1].frame), "untouched");
    assert_eq!(merger.stats().bad_ip_checksum, 1);
    // Every header that leaves verifies: the merged one got a fresh checksum.
    for fr in &frames {
        let ip = &fr[14..34];
        let sum: u32 = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!(
            (folded & 0xffff) + (folded >> 16),
            0xffff,
            "IPv4 header checksum"
        );
    }
}

/// The gateway hands packets to the engine one at a time (`rx_parsed`): a flow's segments that
/// continue its item, with the NIC's verdicts, take the run path there too (every merge but
/// the cut ones), and the packets that leave verify and carry the stream's bytes.
#[test]
fn one_at_a_time_segments_with_the_nics_verdicts_take_the_run_path() {
    use pxio::wire::Parsed;
    use pxio::PacketBuf;
    let f = flow();
    let case = in_order(&f, 30, 1448);
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(256)).unwrap();
    let mut out = Vec::new();
    for (k, i) in case.inputs.iter().enumerate() {
        let mut b = pool.packet(&i.frame);
        b.set_ip_csum_verdict(Some(true));
        b.set_l4_csum_verdict(Some(true));
        let parsed = Parsed::of(b.head(), b.len());
        merger.rx_parsed(b, parsed, 1_000 + k as u64, &mut out);
    }
    merger.flush_all(10_000, &mut out);
    let s = merger.stats();
    assert!(s.merges > 20, "{} merges", s.merges);
    assert_eq!(s.run_merges, s.merges - s.cuts);
    let frames: Vec<Vec<u8>> = out.iter().map(|b| b.to_vec()).collect();
    assert_eq!(receiver_view(&case, &frames), (0, false));
    let carried: usize = frames.iter().map(|f| tcp_verdict(f).unwrap().1.len()).sum();
    assert_eq!(carried, 30 * 1448, "every byte once");
}

/// `tcp_checksums_ok`, the check a caller makes before vouching for a segment itself: a
/// segment in a chain of buffers verifies in software on either family; a flipped payload byte
/// in its last buffer, or a flipped IPv4 header byte, fails it; and the NIC's verdict, where the
/// buffer carries one, is what it answers.
#[test]
fn a_chained_segments_checksums_are_checked_in_every_buffer() {
    use pxio::merge::tcp_checksums_ok;
    use pxio::wire::{Class, Parsed};
    use pxio::PacketBuf;
    let pool = HeapPool::new(64);
    for v6 in [false, true] {
        let flow = FlowSpec { v6, ..flow() };
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 13 + i / 7) as u8).collect();
        let frame = common::tcp_frame(&flow, 7, 1, 1, common::SegFlags::default(), &payload);
        let chained = |frame: &[u8]| {
            let mut head = pool.packet(&frame[..200]);
            for piece in frame[200..].chunks(1500) {
                assert!(head.chain(pool.packet(piece)).is_ok());
            }
            head
        };
        let check = |pkt: &HeapBuf| {
            let parsed = Parsed::of(pkt.head(), pkt.len());
            let Class::Tcp(h) = *parsed.class() else {
                panic!("v6 {v6}: a TCP segment");
            };
            tcp_checksums_ok(pkt, &h)
        };
        let good = chained(&frame);
        assert!(good.num_segs() > 3);
        assert!(check(&good), "v6 {v6}: an intact segment verifies");
        let mut damaged = frame.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0x40;
        let mut bad = chained(&damaged);
        assert!(!check(&bad), "v6 {v6}: a damaged last buffer fails");
        bad.set_l4_csum_verdict(Some(true));
        bad.set_ip_csum_verdict(Some(true));
        assert!(check(&bad), "v6 {v6}: the NIC's verdict is trusted");
        let mut refused = chained(&frame);
        refused.set_l4_csum_verdict(Some(false));
        assert!(!check(&refused), "v6 {v6}: the NIC's refusal too");
        if !v6 {
            let mut ip_damaged = frame.clone();
            ip_damaged[14 + 8] ^= 0x01; // the TTL: the header checksum no longer holds
            assert!(!check(&chained(&ip_damaged)), "a damaged IPv4 header fails");
        }
    }
    assert_eq!(pool.in_use(), 0);
}
