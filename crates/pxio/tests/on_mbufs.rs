//! The same properties as the heap-buffer tests, on real DPDK mbufs under an EAL: the engine
//! code that runs in the gateway is the code these tests prove. Fewer cases: each case
//! allocates real mbufs.

mod common;

use common::{
    assert_imtu_bound, case_strategy, check_outputs, config, full_mss_case, roomy_config, run,
    Knobs,
};
use dpdk::testing::{assert_no_leaks, pool};
use dpdk::Mbuf;
use proptest::prelude::*;
use pxio::caravan::{self, CaravanBuilder, CaravanConfig};
use pxio::merge::Merger;
use pxio::split::{split_tcp, SplitOffloads};
use pxio::PacketBuf;

fn mbuf(pool: &dpdk::Mempool, bytes: &[u8]) -> Mbuf {
    let mut m = pool.alloc().expect("test pool sized for the case");
    m.extend_from_slice(bytes).expect("frames fit one mbuf");
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn merging_on_mbufs_never_corrupts_and_never_leaks(
        case in case_strategy(Knobs { max_flows: 3, max_stream: 12_000, ..Knobs::default() }),
        delay in any::<bool>(),
        // Whole frames carry the NIC's verdicts on their IPv4 header and TCP checksums
        // (trusted: the payload is not read, and in-order segments take the run path), or no
        // marks (the engine verifies them itself).
        nic_marks in any::<bool>(),
    ) {
        let rx = pool(4096, 2048 + 128);
        let headers = pool(1024, 256);
        {
            let mut merger = Merger::<Mbuf>::new(config(9000, delay), headers.clone()).unwrap();
            let frames = run(&case, &mut merger, |f| {
                let mut m = mbuf(&rx, f);
                if nic_marks {
                    let (ip, l4) = common::nic_rx_verdicts(f);
                    m.set_ip_csum_verdict(ip);
                    m.set_l4_csum_verdict(l4);
                }
                m
            });
            check_outputs(&case, &frames, 9000);
        }
        assert_no_leaks(&rx);
        assert_no_leaks(&headers);
    }

    /// Every buffer of a merged packet carries bytes of one input segment only: every merge
    /// path (append, prepend, gap-fill, cut, carried rests, chained inputs) links input
    /// buffers or parts of them and never moves payload across them. That is how the NF API
    /// tells the sender's segment size from a merged packet (`PacketMeta::seg_size`). On
    /// mbufs, whose tailroom a merge could be tempted to fill.
    #[test]
    fn every_merged_buffer_holds_bytes_of_one_input_segment(
        case in case_strategy(Knobs { max_flows: 3, max_stream: 12_000, ..Knobs::default() }),
        delay in any::<bool>(),
    ) {
        use pxio::wire::{Class, FlowKey, Parsed};
        let tcp = |frame: &[u8]| match *Parsed::of(frame, frame.len()).class() {
            Class::Tcp(h) => Some(h),
            _ => None,
        };
        /// The stream ranges a flow's segments carried.
        struct Carried {
            key: FlowKey,
            isn: u32,
            ranges: Vec<(usize, usize)>,
        }
        let mut carried: Vec<Carried> = Vec::new();
        for input in case.inputs.iter().filter(|i| !i.junk) {
            let (Some(fi), Some(h)) = (input.flow, tcp(&input.frame)) else { continue };
            let range = (input.offset, input.offset + input.len);
            match carried.iter_mut().find(|c| c.key == h.key) {
                Some(c) => c.ranges.push(range),
                None => carried.push(Carried { key: h.key, isn: case.flows[fi].isn, ranges: vec![range] }),
            }
        }
        let rx = pool(4096, 2048 + 128);
        let headers = pool(1024, 256);
        {
            let mut merger = Merger::<Mbuf>::new(config(9000, delay), headers.clone()).unwrap();
            let outputs = common::run_with(
                &case,
                &mut merger,
                |_, i| common::assemble(i, &|f: &[u8]| mbuf(&rx, f)),
                |p| {
                    let mut lens = Vec::new();
                    p.for_each_segment(|s| lens.push(s.len()));
                    (p.to_vec(), lens)
                },
            );
            for (frame, lens) in &outputs {
                let Some(h) = tcp(frame) else { continue };
                let Some(Carried { isn, ranges, .. }) = carried.iter().find(|c| c.key == h.key)
                else {
                    continue;
                };
                let l4 = usize::from(h.l2_len + h.l3_len);
                let seq = u32::from_be_bytes(frame[l4 + 4..l4 + 8].try_into().unwrap());
                let hdr_len = l4 + usize::from(h.l4_len);
                let mut at = seq.wrapping_sub(*isn) as usize;
                for (i, &len) in lens.iter().enumerate() {
                    let bytes = if i == 0 { len.saturating_sub(hdr_len) } else { len };
                    let span = (at, at + bytes);
                    prop_assert!(
                        bytes == 0 || ranges.iter().any(|&(a, b)| a <= span.0 && span.1 <= b),
                        "buffer {i} of {lens:?} carries stream bytes {span:?}, which no input \
                         segment carried alone"
                    );
                    at += bytes;
                }
            }
        }
        assert_no_leaks(&rx);
        assert_no_leaks(&headers);
    }

    #[test]
    fn full_segments_on_mbufs_leave_imtu_sized(
        (case, imtu) in full_mss_case(),
        delay in any::<bool>(),
    ) {
        let rx = pool(4096, 2048 + 128);
        let headers = pool(1024, 256);
        {
            let mut merger = Merger::<Mbuf>::new(roomy_config(imtu, delay), headers.clone()).unwrap();
            let frames = run(&case, &mut merger, |f| mbuf(&rx, f));
            let emitted = check_outputs(&case, &frames, usize::from(imtu));
            assert_imtu_bound(&case, &emitted, imtu);
        }
        assert_no_leaks(&rx);
        assert_no_leaks(&headers);
    }
}

/// What the NIC reads from an mbuf the merge engine sends: the offloads its flags and
/// `tx_offload` fields ask for (`None` when none).
fn mbuf_tx_offload(m: &Mbuf) -> Option<pxio::TxOffload> {
    use dpdk::tx_flags;
    let flags = m.ol_flags();
    if flags & (tx_flags::IP_CKSUM | tx_flags::TCP_CKSUM | tx_flags::TCP_SEG) == 0 {
        return None;
    }
    let (l2_len, l3_len, l4_len) = m.header_lens();
    Some(pxio::TxOffload {
        l2_len,
        l3_len,
        l4_len,
        ipv4: flags & tx_flags::IPV4 != 0,
        ip_checksum: flags & tx_flags::IP_CKSUM != 0,
        tcp_checksum: flags & (tx_flags::TCP_CKSUM | tx_flags::TCP_SEG) != 0,
        udp_checksum: false,
        tso_segsz: m.tso_request().unwrap_or(0),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// With TSO on real mbufs, what DPDK hands the NIC is right: `RTE_MBUF_F_TX_TCP_SEG` and
    /// `tso_segsz` at the iMTU on every packet past it (none on the others), header lengths,
    /// seeds that give valid checksums, every stream intact, and every mbuf back in its pool.
    #[test]
    fn with_tso_on_mbufs_the_nic_is_asked_right_and_nothing_leaks(
        case in case_strategy(Knobs { max_flows: 3, max_stream: 40_000, ..Knobs::default() }),
        delay in any::<bool>(),
    ) {
        use pxio::merge::MergeConfig;
        let imtu = 9000u16;
        let rx = pool(4096, 2048 + 128);
        let headers = pool(1024, 256);
        {
            let cfg = MergeConfig {
                checksum_offload: true,
                tso_max_len: u16::MAX,
                ..config(imtu, delay)
            };
            let mut merger = Merger::<Mbuf>::new(cfg, headers.clone()).unwrap();
            let frames = common::run_with(
                &case,
                &mut merger,
                |_, i| {
                    let mut m = common::assemble(i, &|f: &[u8]| mbuf(&rx, f));
                    let (ip, l4) = common::nic_rx_verdicts(&i.frame);
                    m.set_ip_csum_verdict(ip);
                    m.set_l4_csum_verdict(l4);
                    m
                },
                |m| {
                    let o = mbuf_tx_offload(&m);
                    let ip_len = m.len() - o.map_or(0, |o| usize::from(o.l2_len));
                    match o {
                        Some(o) if ip_len > usize::from(imtu) => assert_eq!(
                            usize::from(o.tso_segsz),
                            usize::from(imtu - o.l3_len) - usize::from(o.l4_len),
                            "a {ip_len} B packet asks for pieces of the iMTU"
                        ),
                        _ => assert_eq!(m.tso_request(), None, "no TSO within the iMTU"),
                    }
                    common::nic_tx_frame(m.to_vec(), o)
                },
            );
            check_outputs(&case, &frames, usize::from(u16::MAX));
        }
        assert_no_leaks(&rx);
        assert_no_leaks(&headers);
    }
}

#[test]
fn split_and_caravans_on_mbufs() {
    let rx = pool(256, 9216 + 128);
    let small = pool(256, 512);
    let flow = common::FlowSpec {
        v6: false,
        id: 9,
        sport: 1,
        dport: 2,
        isn: 5,
        ack: 6,
        df: false,
        ttl: 9,
        ..common::FlowSpec::default()
    };
    let payload: Vec<u8> = (0..8000).map(|i| (i % 199) as u8).collect();
    let frame = common::tcp_frame(
        &flow,
        5,
        77,
        1,
        common::SegFlags {
            psh: true,
            ..Default::default()
        },
        &payload,
    );
    let mut out = Vec::new();
    split_tcp(
        mbuf(&rx, &frame),
        1500,
        SplitOffloads::default(),
        &small,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 6);
    let mut rebuilt = Vec::new();
    for seg in &out {
        let (_, p, valid, _) = common::tcp_verdict(&seg.to_vec()).unwrap();
        assert!(valid);
        rebuilt.extend(p);
    }
    assert_eq!(rebuilt, payload);
    drop(out);

    // Three datagrams in a caravan and back.
    let dgrams: Vec<Vec<u8>> = [0usize, 100, 1400]
        .iter()
        .map(|&n| {
            let mut v = Vec::new();
            etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
                .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
                .udp(7, 8)
                .write(&mut v, &vec![n as u8; n])
                .unwrap();
            v
        })
        .collect();
    let cfg = CaravanConfig::default();
    let mut b = CaravanBuilder::start(mbuf(&rx, &dgrams[0]), cfg, &small)
        .map_err(|(e, _)| e)
        .unwrap();
    for d in &dgrams[1..] {
        b.push(mbuf(&rx, d)).map_err(|(e, _)| e).unwrap();
    }
    let caravan = b.finish();
    assert_eq!(
        caravan.num_segs(),
        4,
        "outer header + three datagrams, chained"
    );
    let mut out = Vec::new();
    caravan::unpack(caravan, &cfg, &small, &mut out)
        .map_err(|(e, _)| e)
        .unwrap();
    let back: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    for (a, b) in dgrams.iter().zip(&back) {
        assert_eq!(a[34..], b[34..], "UDP datagram restored byte for byte");
        assert_eq!(a[..18], b[..18]);
    }
    drop(out);
    assert_no_leaks(&rx);
    assert_no_leaks(&small);
}

#[test]
fn an_mbufs_checksum_verdict_is_the_nics() {
    let rx = pool(16, 2048 + 128);
    let mut m = mbuf(&rx, &[0u8; 60]);
    assert_eq!(m.l4_csum_verdict(), None, "no RX flags: no verdict");
    m.mark_rx_l4_checksum_good();
    assert_eq!(m.l4_csum_verdict(), Some(true));
    drop(m);
    assert_no_leaks(&rx);
}

#[test]
fn a_split_on_buffer_boundaries_moves_the_mbufs_and_leaks_none() {
    let rx = pool(256, 2048 + 128);
    let small = pool(256, 512);
    for v6 in [false, true] {
        for (vouched, offload) in [(false, false), (true, false), (false, true)] {
            let flow = common::FlowSpec {
                v6,
                id: 2,
                sport: 80,
                dport: 4000,
                isn: 9,
                ack: 1,
                ..common::FlowSpec::default()
            };
            let headers = 14 + if v6 { 72 } else { 52 };
            let mss = 1500 - (headers - 14);
            let payload: Vec<u8> = (0..4 * mss + 33).map(|i| (i % 241) as u8).collect();
            let frame = common::tcp_frame(&flow, 9, 5, 1, Default::default(), &payload);
            // One mbuf per piece, as a merged packet with an aligned iMTU holds them; the later
            // ones without headroom, so each piece needs a header mbuf (split_inplace.rs tests
            // the pieces that take theirs in place).
            let build = || {
                let mut pkt = mbuf(&rx, &frame[..headers + mss]);
                for k in 1..5 {
                    let end = (headers + (k + 1) * mss).min(frame.len());
                    let mut m = rx.alloc().unwrap();
                    let headroom = m.headroom();
                    m.prepend(headroom).unwrap();
                    m.truncate(0).unwrap();
                    m.extend_from_slice(&frame[headers + k * mss..end]).unwrap();
                    pkt.chain(m).map_err(|(e, _)| e).unwrap();
                }
                pkt
            };
            // Too few header mbufs: refused whole, the packet back unchanged, nothing taken.
            {
                let tiny = pool(3, 512);
                let r = split_tcp(
                    build(),
                    1500,
                    SplitOffloads::default(),
                    &tiny,
                    &mut Vec::new(),
                );
                let Err((pxio::split::SplitError::PoolExhausted, back)) = r else {
                    panic!("a pool of 3 cannot head 4 pieces");
                };
                assert_eq!((back.num_segs(), back.to_vec()), (5, frame.clone()));
                drop(back);
                assert_no_leaks(&tiny);
            }
            let mut pkt = build();
            // A cut inside a buffer is refused and leaves the chain as it was.
            assert!(pkt.detach_at(headers + 10).is_none());
            assert_eq!((pkt.num_segs(), pkt.len()), (5, frame.len()));
            PacketBuf::set_l4_csum_verdict(&mut pkt, vouched.then_some(true));
            let offloads = SplitOffloads {
                tso: false,
                checksum: offload,
            };
            let mut out = Vec::new();
            let n = split_tcp(pkt, 1500, offloads, &small, &mut out)
                .map_err(|(e, _)| e)
                .unwrap();
            assert_eq!(n, 5);
            let segs: Vec<usize> = out.iter().map(|m| m.num_segs()).collect();
            assert_eq!(segs, [1, 2, 2, 2, 2], "the mbufs moved, none attached");
            let mut rebuilt = Vec::new();
            for seg in &out {
                let bytes = seg.to_vec();
                assert!(bytes.len() - 14 <= 1500);
                if !offload {
                    let (_, _, valid, _) = common::tcp_verdict(&bytes).unwrap();
                    assert!(valid, "v6 {v6}, vouched {vouched}");
                }
                rebuilt.extend_from_slice(&bytes[headers..]);
            }
            assert_eq!(rebuilt, payload);
            drop(out);
            assert_no_leaks(&rx);
            assert_no_leaks(&small);
        }
    }
}

/// Through cuts, a merged packet keeps one buffer per merged segment, so the NF API reports the
/// sender's segment size (read from the buffer chain) and splitting to it gives the sender's
/// segments back. 20 segments of 1448 B into a 9000 B iMTU: every full packet ends in a cut, every
/// later one begins with a cut's rest. On real mbufs, whose tailroom a cut could be tempted to
/// fill: filling it was tried, and pieces came out longer than the sender's.
#[test]
fn the_senders_segment_size_survives_cuts() {
    use pxio::{ManualClock, PxioBuilder, RxPacket};
    let (n, mss) = (20u32, 1448usize);
    for v6 in [false, true] {
        let rx = pool(256, 2048 + 128);
        let headers = pool(256, 256);
        let fl = common::simple_flow(if v6 { 8 } else { 7 });
        let hdr = 14 + fl.l3_l4_len();
        let frames = common::segment_frames(&fl, n, mss);
        let stream: Vec<u8> = frames.iter().flat_map(|f| f[hdr..].to_vec()).collect();
        {
            let mut px = PxioBuilder::new()
                .imtu(9000)
                .delay(false)
                .build::<Mbuf, _>(headers.clone(), ManualClock::new(0))
                .unwrap();
            let mut got: Vec<RxPacket<Mbuf>> = Vec::new();
            px.rx_meta(frames.iter().map(|f| mbuf(&rx, f)), &mut got);
            assert!(got.len() >= 4, "v6 {v6}: three full packets and the tail");
            let mut full_sized = 0;
            for RxPacket { pkt, meta } in got {
                let meta = meta.expect("a merged TCP packet has metadata");
                assert!(usize::from(meta.seg_size) <= mss, "v6 {v6}: {meta:?}");
                full_sized += usize::from(usize::from(meta.seg_size) == mss);
                px.tx_to(pkt, meta.seg_mtu()).unwrap();
            }
            assert!(
                full_sized >= 3,
                "v6 {v6}: the full packets hold whole segments"
            );
            let mut wire: Vec<Mbuf> = Vec::new();
            px.flush_tx(&mut wire);
            let mut out = Vec::new();
            for p in &wire {
                assert!(p.len() <= hdr + mss, "v6 {v6}: a piece of {} B", p.len());
                out.extend_from_slice(&p.to_vec()[hdr..]);
            }
            assert_eq!(out, stream, "v6 {v6}: the stream, byte for byte");
        }
        assert_no_leaks(&rx);
        assert_no_leaks(&headers);
    }
}
