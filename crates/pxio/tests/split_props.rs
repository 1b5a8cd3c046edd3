//! Splitting to the path MTU: segments are correct TCP, the stream is intact, flags are where
//! TCP puts them, and the payload is shared, not copied.

mod common;

use common::{tcp_frame, FlowSpec, SegFlags};
use etherparse::{SlicedPacket, TransportSlice};
use proptest::prelude::*;
use pxio::split::{split_tcp, SplitError, SplitOffloads};
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
    ) {
        let f = flow(v6, df);
        let payload: Vec<u8> = (0..len).map(|i| (i * 17 % 253) as u8).collect();
        let flags = SegFlags { psh, fin, ..SegFlags::default() };
        let frame = tcp_frame(&f, f.isn, 1000, 5, flags, &payload);
        let pool = HeapPool::new(256);
        let pkt = chained(&pool, &frame, 14 + if v6 { 72 } else { 52 }, &cuts);
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
