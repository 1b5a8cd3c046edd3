//! Splitting to the path MTU: segments are correct TCP, the stream is intact, flags are where
//! TCP puts them, and the payload is shared, not copied.

mod common;

use common::{tcp_frame, FlowSpec, SegFlags};
use etherparse::{SlicedPacket, TransportSlice};
use proptest::prelude::*;
use pxio::split::{split_tcp, split_tcp_parsed, SplitError, SplitOffloads};
use pxio::wire::Parsed;
use pxio::{HeapBuf, HeapPool, PacketBuf};

fn flow(v6: bool, df: bool) -> FlowSpec {
    FlowSpec {
        v6,
        id: 3,
        sport: 443,
        dport: 50000,
        isn: u32::MAX - 3000,
        ack: 99,
        df,
        ttl: 61,
        ..FlowSpec::default()
    }
}

/// The frame cut into 1..=4 segments after its `headers` bytes, as a chained buffer.
fn chained(pool: &HeapPool, frame: &[u8], headers: usize, cuts: &[usize]) -> HeapBuf {
    let room = frame.len() - headers;
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| headers + 1 + c % room)
        .filter(|&p| p < frame.len())
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut parts = Vec::new();
    let mut at = 0;
    for p in points {
        parts.push(&frame[at..p]);
        at = p;
    }
    parts.push(&frame[at..]);
    HeapBuf::from_segments(pool, &parts)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn split_segments_are_valid_tcp_and_rebuild_the_payload(
        v6 in any::<bool>(),
        df in any::<bool>(),
        len in 1usize..8900,
        mtu in 576u16..=9000,
        psh in any::<bool>(),
        fin in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..4),
        checksum_offload in any::<bool>(),
        trusted in any::<bool>(),
        on_boundaries in any::<bool>(),
    ) {
        let f = flow(v6, df);
        let payload: Vec<u8> = (0..len).map(|i| (i * 17 % 253) as u8).collect();
        let flags = SegFlags { psh, fin, ..SegFlags::default() };
        let frame = tcp_frame(&f, f.isn, 1000, 5, flags, &payload);
        let pool = HeapPool::new(256);
        let headers = 14 + if v6 { 72 } else { 52 };
        let mss = usize::from(mtu) - (headers - 14);
        let mut pkt = if on_boundaries {
            // One buffer per piece, as a merged packet with an aligned iMTU has: the pieces
            // take the packet's own buffers.
            let cuts: Vec<usize> = (1..len.div_ceil(mss)).map(|k| k * mss - 1).collect();
            chained(&pool, &frame, headers, &cuts)
        } else {
            chained(&pool, &frame, headers, &cuts)
        };
        // A known-good checksum is not verified again, and the last piece's sum is derived
        // from it: the pieces' checksums must be right either way.
        pkt.set_l4_csum_verdict(trusted.then_some(true));
        let mut out = Vec::new();
        let offloads = SplitOffloads { tso: false, checksum: checksum_offload };
        let n = split_tcp(pkt, mtu, offloads, &pool, &mut out).map_err(|(e, _)| e).unwrap();
        prop_assert_eq!(n, out.len());
        let hdr = if v6 { 40 + 32 } else { 20 + 32 };
        let mss = usize::from(mtu) - hdr;
        prop_assert_eq!(n, if hdr + len <= usize::from(mtu) { 1 } else { len.div_ceil(mss) });
        let mut rebuilt = Vec::new();
        for (i, seg) in out.iter().enumerate() {
            let bytes = seg.to_vec();
            prop_assert!(bytes.len() - 14 <= usize::from(mtu).max(hdr + len.min(mss)));
            let p = SlicedPacket::from_ethernet(&bytes).unwrap();
            let Some(TransportSlice::Tcp(tcp)) = &p.transport else { panic!("not TCP") };
            let h = tcp.to_header();
            let last = i + 1 == n;
            prop_assert_eq!(h.sequence_number, f.isn.wrapping_add(rebuilt.len() as u32));
            prop_assert_eq!(h.psh, psh && last, "PSH only on the last segment");
            prop_assert_eq!(h.fin, fin && last, "FIN only on the last segment");
            if !checksum_offload || n == 1 {
                let expected = match p.net.as_ref().unwrap() {
                    etherparse::NetSlice::Ipv4(ip) => {
                        let ih = ip.header();
                        prop_assert_eq!(ih.identification(), 1000u16.wrapping_add(i as u16));
                        prop_assert_eq!(ih.to_header().calc_header_checksum(), ih.header_checksum());
                        h.calc_checksum_ipv4(&ih.to_header(), tcp.payload()).unwrap()
                    }
                    etherparse::NetSlice::Ipv6(ip) => h.calc_checksum_ipv6(&ip.header().to_header(), tcp.payload()).unwrap(),
                    etherparse::NetSlice::Arp(_) => unreachable!("TCP is never carried over ARP"),
                };
                prop_assert_eq!(h.checksum, expected);
            }
            rebuilt.extend_from_slice(tcp.payload());
        }
        prop_assert_eq!(rebuilt, payload);
        drop(out);
        prop_assert_eq!(pool.in_use(), 0);
    }
}

#[test]
fn split_shares_the_payload_instead_of_copying_it() {
    let f = flow(false, true);
    let payload = vec![0xabu8; 8000];
    let frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &payload);
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    split_tcp(
        pool.packet(&frame),
        1500,
        SplitOffloads::default(),
        &pool,
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), 6);
    // Six fresh header segments plus the original buffer, alive through the views: 7, not 12.
    assert_eq!(pool.in_use(), 7);
    drop(out);
    assert_eq!(pool.in_use(), 0);
}

/// A split from the parse the packet came with gives what a split that parses it itself
/// gives, in both families; a parse that no longer fits the packet (that of a shorter frame of
/// the same flow) is not trusted: the packet is parsed again, and still split right, rather
/// than cut at the stale parse's lengths.
#[test]
fn a_split_from_a_carried_parse_equals_one_that_parses() {
    for v6 in [false, true] {
        let f = flow(v6, true);
        let frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[0x5a; 6000]);
        let short = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[0x5a; 3000]);
        let pool = HeapPool::new(256);
        let pieces = |parsed: Option<Parsed>| {
            let mut out = Vec::new();
            let pkt = pool.packet(&frame);
            let n = match parsed {
                Some(p) => {
                    split_tcp_parsed(pkt, &p, 1500, SplitOffloads::default(), &pool, &mut out)
                }
                None => split_tcp(pkt, 1500, SplitOffloads::default(), &pool, &mut out),
            };
            assert_eq!(n.map_err(|(e, _)| e).unwrap(), out.len());
            out.iter().map(|p| p.to_vec()).collect::<Vec<_>>()
        };
        let reference = pieces(None);
        assert_eq!(
            reference.len(),
            5,
            "6000 B in pieces of at most 1448 (1428 in IPv6)"
        );
        assert!(reference.iter().all(|p| p.len() <= 1514));
        assert_eq!(pieces(Some(Parsed::of(&frame, frame.len()))), reference);
        assert_eq!(pieces(Some(Parsed::of(&short, short.len()))), reference);
        assert_eq!(pool.in_use(), 0);
    }
}

#[test]
fn a_corrupt_packet_is_not_laundered_into_valid_segments() {
    let f = flow(true, true);
    let mut frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[7u8; 5000]);
    let at = frame.len() - 100;
    frame[at] ^= 1;
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    let err = split_tcp(
        pool.packet(&frame),
        1500,
        SplitOffloads::default(),
        &pool,
        &mut out,
    );
    assert!(matches!(err, Err((SplitError::BadChecksum, _))));
    assert!(out.is_empty());
    drop(err);
    assert_eq!(pool.in_use(), 0);
}

/// Whether a split piece's TCP checksum verifies.
fn piece_checksum_ok(seg: &HeapBuf) -> bool {
    let bytes = seg.to_vec();
    let p = SlicedPacket::from_ethernet(&bytes).unwrap();
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        panic!("not TCP")
    };
    let h = tcp.to_header();
    let expected = match p.net.as_ref().unwrap() {
        etherparse::NetSlice::Ipv4(ip) => {
            h.calc_checksum_ipv4(&ip.header().to_header(), tcp.payload())
        }
        etherparse::NetSlice::Ipv6(ip) => {
            h.calc_checksum_ipv6(&ip.header().to_header(), tcp.payload())
        }
        etherparse::NetSlice::Arp(_) => unreachable!("TCP is never carried over ARP"),
    };
    expected.unwrap() == h.checksum
}

#[test]
fn a_packet_cut_on_its_buffer_boundaries_gives_its_buffers_to_the_pieces() {
    for v6 in [false, true] {
        let f = flow(v6, true);
        let headers = 14 + if v6 { 72 } else { 52 };
        let mss = 1500 - (headers - 14);
        let payload: Vec<u8> = (0..5 * mss + 100).map(|i| (i % 251) as u8).collect();
        let frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &payload);
        let pool = HeapPool::new(256);
        let parts: Vec<&[u8]> = (0..6)
            .map(|k| {
                &frame[if k == 0 { 0 } else { headers + k * mss }
                    ..(headers + (k + 1) * mss).min(frame.len())]
            })
            .collect();
        for corrupt in [false, true] {
            let mut owned: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
            if corrupt {
                owned[2][7] ^= 0x40;
            }
            let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let pkt = HeapBuf::from_segments(&pool, &refs);
            let mut out = Vec::new();
            let r = split_tcp(pkt, 1500, SplitOffloads::default(), &pool, &mut out);
            if corrupt {
                assert!(matches!(r, Err((SplitError::BadChecksum, _))), "v6 {v6}");
                assert!(out.is_empty());
                continue;
            }
            assert_eq!(r.map_err(|(e, _)| e), Ok(6));
            // The first piece is the packet's own head, each later one a header in front of
            // the packet's next buffer: no view of shared bytes.
            let segs: Vec<usize> = out.iter().map(PacketBuf::num_segs).collect();
            assert_eq!(segs, [1, 2, 2, 2, 2, 2], "v6 {v6}");
            assert_eq!(pool.in_use(), 6 + 5, "the six buffers and five headers");
            assert!(out.iter().all(piece_checksum_ok));
            let mut rebuilt = Vec::new();
            for p in &out {
                rebuilt.extend_from_slice(&p.to_vec()[headers..]);
            }
            assert_eq!(rebuilt, payload);
        }
        assert_eq!(pool.in_use(), 0);
    }
}

#[test]
fn a_corrupt_packet_is_refused_unless_its_checksum_is_vouched_for() {
    for v6 in [false, true] {
        let f = flow(v6, true);
        let mut frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[7u8; 5000]);
        // In the first piece: only the verification can catch it.
        let at = frame.len() - 4900;
        frame[at] ^= 1;
        let pool = HeapPool::new(256);
        // No verdict, or the NIC's "bad": verified in software, refused.
        for verdict in [None, Some(false)] {
            let mut pkt = pool.packet(&frame);
            pkt.set_l4_csum_verdict(verdict);
            let mut out = Vec::new();
            let r = split_tcp(pkt, 1500, SplitOffloads::default(), &pool, &mut out);
            assert!(
                matches!(r, Err((SplitError::BadChecksum, _))),
                "v6 {v6}, verdict {verdict:?}"
            );
            assert!(out.is_empty());
        }
        // Vouched for (wrongly, as an NF that rewrote bytes without clearing the flag would):
        // not verified, but the damage still shows, in the last piece's checksum.
        let mut pkt = pool.packet(&frame);
        pkt.set_l4_csum_verdict(Some(true));
        let mut out = Vec::new();
        let n = split_tcp(pkt, 1500, SplitOffloads::default(), &pool, &mut out).unwrap();
        assert_eq!(n, 4);
        assert!(out[..3].iter().all(piece_checksum_ok));
        assert!(!piece_checksum_ok(&out[3]), "v6 {v6}");
        // The pieces say their checksums are right (a later split need not verify them).
        assert!(out.iter().all(|p| p.l4_csum_verdict() == Some(true)));
        drop(out);
        assert_eq!(pool.in_use(), 0);
    }
}

#[test]
fn tiny_mtu_and_non_tcp_are_handled() {
    let f = flow(false, true);
    let frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[1u8; 3000]);
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    let err = split_tcp(
        pool.packet(&frame),
        52,
        SplitOffloads::default(),
        &pool,
        &mut out,
    );
    assert!(matches!(
        err,
        Err((
            SplitError::MtuTooSmall {
                mtu: 52,
                headers: 52
            },
            _
        ))
    ));
    // TSO: one packet goes out whole, its headers seeded for the NIC.
    let n = split_tcp(
        pool.packet(&frame),
        1500,
        SplitOffloads {
            tso: true,
            checksum: true,
        },
        &pool,
        &mut out,
    )
    .unwrap();
    assert_eq!((n, out.len(), out[0].len()), (1, 1, frame.len()));
    assert_eq!(
        &out[0].to_vec()[24..26],
        &[0, 0],
        "IPv4 checksum left to the NIC"
    );
    // Junk passes through.
    out.clear();
    split_tcp(
        pool.packet(&[1, 2, 3]),
        1500,
        SplitOffloads::default(),
        &pool,
        &mut out,
    )
    .unwrap();
    assert_eq!(out[0].to_vec(), [1, 2, 3]);
}

/// The TCP header of one split piece.
fn tcp_header(seg: &HeapBuf) -> etherparse::TcpHeader {
    let bytes = seg.to_vec();
    let p = SlicedPacket::from_ethernet(&bytes).unwrap();
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        panic!("not TCP")
    };
    tcp.to_header()
}

/// `a < b` in TCP sequence space.
fn seq_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// An inside application sends data with `MSG_OOB` (URG, urgent pointer `ptr` relative to
    /// the packet's sequence number): every piece must point at the same urgent byte, relative to
    /// its own sequence number, and a piece that starts at or after the urgent pointer carries
    /// neither URG nor a pointer — what the sender's TCP puts in its own MSS-sized segments
    /// (Linux `tcp_transmit_skb`). The TSO path must give exactly the same pieces.
    #[test]
    fn split_rebases_the_urgent_pointer(
        v6 in any::<bool>(),
        len in 1usize..20_000,
        mtu in 576u16..=9000,
        ptr in prop_oneof![0u16..=20_000, any::<u16>()],
        checksum_offload in any::<bool>(),
        cuts in prop::collection::vec(any::<usize>(), 0..3),
    ) {
        let f = flow(v6, true);
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let flags = SegFlags { urg: Some(ptr), psh: true, ..SegFlags::default() };
        let frame = tcp_frame(&f, f.isn, 1000, 5, flags, &payload);
        let headers = 14 + if v6 { 72 } else { 52 };
        let pool = HeapPool::new(256);
        let urgent_at = f.isn.wrapping_add(u32::from(ptr));
        let mut by_path = Vec::new();
        for tso in [false, true] {
            let pkt = chained(&pool, &frame, headers, &cuts);
            let mut out = Vec::new();
            let offloads = SplitOffloads { tso, checksum: checksum_offload };
            split_tcp(pkt, mtu, offloads, &pool, &mut out).map_err(|(e, _)| e).unwrap();
            for (i, seg) in out.iter().enumerate() {
                let h = tcp_header(seg);
                let seq = h.sequence_number;
                if i == 0 {
                    prop_assert!(h.urg, "the first piece keeps URG");
                    prop_assert_eq!(h.urgent_pointer, ptr, "the first piece keeps the pointer");
                } else if seq_before(seq, urgent_at) {
                    prop_assert!(h.urg, "piece {} (seq {}) precedes the urgent pointer", i, seq);
                    prop_assert_eq!(
                        seq.wrapping_add(u32::from(h.urgent_pointer)),
                        urgent_at,
                        "piece {} points at the original urgent byte", i
                    );
                } else {
                    prop_assert!(!h.urg, "piece {} starts past the urgent byte: no URG", i);
                    prop_assert_eq!(h.urgent_pointer, 0, "piece {} carries no pointer", i);
                }
            }
            by_path.push(out.iter().map(PacketBuf::to_vec).collect::<Vec<_>>());
        }
        prop_assert_eq!(&by_path[0], &by_path[1], "software split and TSO path agree");
        prop_assert_eq!(pool.in_use(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A SYN carrying data (TCP Fast Open) larger than the path MTU becomes one SYN followed by
    /// plain data segments, never several SYNs (each would open the connection anew); PSH/FIN
    /// stay on the last piece. The TSO path gives the same pieces.
    #[test]
    fn a_split_syn_stays_one_syn(
        v6 in any::<bool>(),
        len in 1usize..9000,
        mtu in 576u16..=1500,
        fin in any::<bool>(),
        checksum_offload in any::<bool>(),
    ) {
        let f = flow(v6, true);
        let payload: Vec<u8> = (0..len).map(|i| (i * 3 % 241) as u8).collect();
        let flags = SegFlags { syn: true, psh: true, fin, ..SegFlags::default() };
        let frame = tcp_frame(&f, f.isn, 1000, 5, flags, &payload);
        let header_bytes = frame.len() - len;
        let pool = HeapPool::new(256);
        let mut by_path = Vec::new();
        for tso in [false, true] {
            let mut out = Vec::new();
            let offloads = SplitOffloads { tso, checksum: checksum_offload };
            split_tcp(pool.packet(&frame), mtu, offloads, &pool, &mut out)
                .map_err(|(e, _)| e)
                .unwrap();
            let headers: Vec<_> = out.iter().map(tcp_header).collect();
            let syns = headers.iter().filter(|h| h.syn).count();
            prop_assert_eq!(syns, 1, "{} pieces, {} of them SYNs", out.len(), syns);
            prop_assert!(headers[0].syn, "the first piece is the SYN");
            let last = headers.len() - 1;
            // The SYN takes one sequence number before the data (RFC 9293 §3.4).
            let mut next_seq = f.isn.wrapping_add(1);
            for (i, (h, seg)) in headers.iter().zip(&out).enumerate() {
                prop_assert_eq!(h.fin, fin && i == last, "FIN on the last piece only");
                prop_assert_eq!(h.psh, i == last, "PSH on the last piece only");
                let data_seq = h.sequence_number.wrapping_add(u32::from(h.syn));
                prop_assert_eq!(data_seq, next_seq, "piece {} continues the stream", i);
                next_seq = next_seq.wrapping_add((seg.len() - header_bytes) as u32);
            }
            prop_assert_eq!(next_seq, f.isn.wrapping_add(1 + len as u32), "every byte once");
            by_path.push(out.iter().map(PacketBuf::to_vec).collect::<Vec<_>>());
        }
        prop_assert_eq!(&by_path[0], &by_path[1], "software split and TSO path agree");
    }
}

/// A piece's IPv4 header is rewritten, so a NIC verdict received with the packet must not
/// survive on it: without TX offload each piece's header checksum is computed (and said to be
/// right), with offload (or TSO) the field is a seed and nothing is claimed.
#[test]
fn pieces_do_not_keep_the_received_ip_checksum_verdict() {
    let pool = HeapPool::new(256);
    for offload in [false, true] {
        for tso in [false, true] {
            let f = flow(false, true);
            let frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[0x5a; 8000]);
            let mut pkt = pool.packet(&frame);
            pkt.set_ip_csum_verdict(Some(true));
            pkt.set_l4_csum_verdict(Some(true));
            let mut out = Vec::new();
            let offloads = SplitOffloads {
                checksum: offload,
                tso,
            };
            split_tcp(pkt, 1500, offloads, &pool, &mut out).expect("splits");
            assert!(!out.is_empty());
            for piece in &out {
                let want = if offload || tso { None } else { Some(true) };
                assert_eq!(piece.ip_csum_verdict(), want, "offload {offload} tso {tso}");
            }
        }
    }
}

/// `request_tso` takes the headers from its caller: lengths no IP or TCP header has are
/// refused, the packet left as it was, whatever the caller hands it (never a panic).
#[test]
fn a_tso_request_with_impossible_header_lengths_changes_nothing() {
    for v6 in [false, true] {
        let f = flow(v6, true);
        let frame = tcp_frame(&f, f.isn, 1, 5, SegFlags::default(), &[7u8; 3000]);
        let hdr = *Parsed::of(&frame, frame.len())
            .tcp()
            .expect("a TCP segment");
        let pool = HeapPool::new(8);
        let mut good = pool.packet(&frame);
        assert!(
            pxio::split::request_tso(&mut good, &hdr, 1448),
            "the real headers"
        );
        assert!(good.requested_tx_offload().is_some());
        let mut pkt = pool.packet(&frame);
        for bad in [
            pxio::wire::Headers { l3_len: 8, ..hdr },
            pxio::wire::Headers {
                l3_len: 20 + 20 * u16::from(v6) - 4,
                ..hdr
            },
            pxio::wire::Headers { l4_len: 12, ..hdr },
        ] {
            assert!(!pxio::split::request_tso(&mut pkt, &bad, 1448), "{bad:?}");
            assert_eq!(pkt.to_vec(), frame, "bytes unchanged");
            assert_eq!(pkt.requested_tx_offload(), None, "nothing asked of the NIC");
        }
    }
}
