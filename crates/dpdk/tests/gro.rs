//! `rte_gro` through the safe wrapper, on a real EAL: segments of one flow come out as one
//! mbuf chain holding the concatenated bytes, everything else passes through, and no mbuf leaks.

use dpdk::testing::{assert_no_leaks, eal, pool};
use dpdk::{ptype, Burst, GroContext, Mbuf, Mempool};
use etherparse::{PacketBuilder, TcpOptionElement};

const ETH_LEN: u8 = 14;
const IP_LEN: u16 = 20;
/// TCP header with NOP, NOP, time stamps.
const TCP_LEN: u8 = 32;
const HDRS: usize = ETH_LEN as usize + IP_LEN as usize + TCP_LEN as usize;

/// An Ethernet/IPv4/TCP frame with a bare ACK and time stamps, as a TSO burst's segment.
fn tcp_frame(src_port: u16, seq: u32, tsval: u32, payload: &[u8]) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ipv4([198, 18, 0, 1], [10, 0, 0, 2], 64)
        .tcp(src_port, 5201, seq, 512)
        .ack(77)
        .options(&[
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
            TcpOptionElement::Timestamp(tsval, 9),
        ])
        .unwrap();
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut frame, payload).unwrap();
    assert_eq!(frame.len(), HDRS + payload.len());
    frame
}

fn udp_frame(payload: &[u8]) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ipv4([198, 18, 0, 1], [10, 0, 0, 2], 64)
        .udp(4000, 4001);
    let mut frame = Vec::new();
    builder.write(&mut frame, payload).unwrap();
    frame
}

/// An mbuf holding `frame`, typed and with header lengths as `rte_gro` needs them.
fn mbuf(pool: &Mempool, frame: &[u8], ptype: u32, lens: (u8, u16, u8)) -> Mbuf {
    let mut m = pool.alloc().unwrap();
    m.extend_from_slice(frame).unwrap();
    m.set_packet_type(ptype);
    m.set_header_lens(lens.0, lens.1, lens.2);
    m
}

fn tcp_mbuf(pool: &Mempool, frame: &[u8]) -> Mbuf {
    mbuf(
        pool,
        frame,
        ptype::ETHER_IPV4_TCP,
        (ETH_LEN, IP_LEN, TCP_LEN),
    )
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ salt).collect()
}

/// What the merge bench's rte_gro baseline does inside its timed region: the software parse
/// fills in exactly what `tcp_mbuf` sets by hand, so GRO merges the same.
#[test]
fn a_software_parse_types_the_packet_as_rte_gro_needs() {
    let pool = pool(16, 2048 + 128);
    let (p1, p2) = (pattern(1448, 1), pattern(1448, 2));
    let raw = |frame: &[u8]| {
        let mut m = pool.alloc().unwrap();
        m.extend_from_slice(frame).unwrap();
        m
    };
    let mut first = raw(&tcp_frame(40000, 1000, 5, &p1));
    assert_eq!(first.packet_type(), 0, "a fresh mbuf is untyped");
    assert_eq!(first.parse_packet_type(), ptype::ETHER_IPV4_TCP);
    assert_eq!(first.packet_type(), ptype::ETHER_IPV4_TCP);
    assert_eq!(first.header_lens(), (ETH_LEN, IP_LEN, TCP_LEN));
    let mut second = raw(&tcp_frame(40000, 1000 + 1448, 5, &p2));
    second.parse_packet_type();
    let mut gro = GroContext::new(eal(), 4, 8).unwrap();
    let mut burst = Burst::<4>::new();
    burst.push(first).unwrap();
    burst.push(second).unwrap();
    assert_eq!(gro.reassemble(&mut burst), 2);
    assert_eq!(gro.item_count(), 1, "merged on the parsed lengths");
    let mut out = Burst::<4>::new();
    gro.timeout_flush(0, &mut out);
    assert_eq!(out.as_slice()[0].len(), HDRS + 2 * 1448);

    let mut udp = raw(&udp_frame(b"not tcp"));
    assert_eq!(
        udp.parse_packet_type(),
        ptype::L2_ETHER | ptype::L3_IPV4 | ptype::L4_UDP
    );
    assert_eq!(udp.header_lens(), (14, 20, 8));
    let v6 = {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
            .ipv6([0x20; 16], [0x30; 16], 64)
            .tcp(1, 2, 3, 512)
            .options(&[
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(1, 2),
            ])
            .unwrap();
        let mut f = Vec::new();
        b.write(&mut f, b"v6").unwrap();
        f
    };
    let mut v6 = raw(&v6);
    assert_eq!(
        v6.parse_packet_type(),
        ptype::L2_ETHER | ptype::L3_IPV6 | ptype::L4_TCP
    );
    assert_eq!(v6.header_lens(), (14, 40, 32));
    // A frame cut inside its IPv4 header: typed no further than Ethernet, no read past the end.
    let mut short = raw(&tcp_frame(40000, 1, 5, b"x")[..20]);
    assert_eq!(short.parse_packet_type() & !ptype::L2_ETHER, 0);

    let mut hashed = raw(&udp_frame(b"h"));
    assert_eq!(hashed.rss_hash(), None);
    hashed.set_rss_hash(0xdead_beef);
    assert_eq!(hashed.rss_hash(), Some(0xdead_beef));

    drop((gro, out, udp, v6, short, hashed));
    assert_no_leaks(&pool);
}

#[test]
fn in_order_segments_merge_into_one_chain_and_other_packets_pass() {
    let pool = pool(64, 2048 + 128);
    let mut gro = GroContext::new(eal(), 4, 8).unwrap();
    let (p1, p2) = (pattern(1448, 1), pattern(1448, 2));
    let first = tcp_frame(40000, 1000, 5, &p1);
    let second = tcp_frame(40000, 1000 + 1448, 5, &p2);
    let other_flow = tcp_frame(40001, 9, 5, &pattern(100, 3));
    let udp = udp_frame(b"not tcp");

    let mut burst = Burst::<32>::new();
    for m in [
        tcp_mbuf(&pool, &first),
        mbuf(&pool, &udp, ptype::L2_ETHER | ptype::L3_IPV4, (14, 20, 8)),
        tcp_mbuf(&pool, &second),
        tcp_mbuf(&pool, &other_flow),
    ] {
        burst.push(m).unwrap();
    }

    assert_eq!(
        gro.reassemble(&mut burst),
        3,
        "the table takes the three TCP segments"
    );
    assert_eq!(burst.len(), 1, "the UDP packet stays in the burst");
    assert_eq!(burst.as_slice()[0].to_vec(), udp, "untouched");
    assert_eq!(gro.item_count(), 2, "one merged packet, one other flow");
    assert_eq!(pool.in_use(), 4, "nothing freed or duplicated");

    let mut out = Burst::<32>::new();
    assert_eq!(
        gro.timeout_flush(u64::MAX, &mut out),
        0,
        "nothing is that old"
    );
    assert_eq!(gro.timeout_flush(0, &mut out), 2);
    assert_eq!(gro.item_count(), 0);
    let (merged, single): (Vec<&Mbuf>, Vec<&Mbuf>) =
        out.as_slice().iter().partition(|m| m.num_segs() == 2);
    let (merged, single) = (merged[0], single[0]);

    let bytes = merged.to_vec();
    assert_eq!(bytes.len(), HDRS + 2 * 1448);
    let mut expected = first[..HDRS].to_vec();
    expected.extend_from_slice(&p1);
    expected.extend_from_slice(&p2);
    let ip_total = (usize::from(IP_LEN) + usize::from(TCP_LEN) + 2 * 1448) as u16;
    expected[16..18].copy_from_slice(&ip_total.to_be_bytes());
    assert_eq!(
        bytes, expected,
        "headers of the first segment, both payloads in order"
    );
    assert_eq!(
        merged.segments().map(<[u8]>::len).collect::<Vec<_>>(),
        [HDRS + 1448, 1448],
        "zero-copy: the second segment is chained with its headers cut"
    );
    assert_eq!(
        single.to_vec(),
        other_flow,
        "the other flow's segment comes back whole"
    );

    drop((burst, out));
    assert_no_leaks(&pool);
}

#[test]
fn segments_with_different_time_stamps_or_flags_are_not_merged() {
    let pool = pool(64, 2048 + 128);
    let mut gro = GroContext::new(eal(), 4, 8).unwrap();
    let a = tcp_frame(40000, 0, 5, &pattern(1448, 0));
    let b = tcp_frame(40000, 1448, 6, &pattern(1448, 0));
    let mut syn = tcp_frame(40000, 2896, 6, &pattern(10, 0));
    syn[14 + 20 + 13] |= 0x02; // SYN: rte_gro takes bare ACKs only
    let mut burst = Burst::<8>::new();
    for f in [&a, &b, &syn] {
        burst.push(tcp_mbuf(&pool, f)).unwrap();
    }
    assert_eq!(gro.reassemble(&mut burst), 2);
    assert_eq!(burst.as_slice()[0].to_vec(), syn);
    assert_eq!(
        gro.item_count(),
        2,
        "a time stamp change starts a new packet"
    );
    drop(burst);
    drop(gro);
    assert_no_leaks(&pool);
}

#[test]
fn packets_unsafe_to_parse_pass_through_with_their_metadata() {
    let pool = pool(64, 2048 + 128);
    let mut gro = GroContext::new(eal(), 4, 8).unwrap();
    let good = tcp_frame(40000, 0, 5, &pattern(1448, 0));
    let mut burst = Burst::<8>::new();
    // Claims TCP/IPv4 with 66 bytes of headers but holds 30 bytes.
    burst.push(tcp_mbuf(&pool, &good[..30])).unwrap();
    burst.push(tcp_mbuf(&pool, &good)).unwrap();
    // A shallow clone: rte_gro would write the shared IPv4 header when it merges.
    let original = tcp_mbuf(&pool, &tcp_frame(40000, 1448, 5, &pattern(1448, 0)));
    let clone = original.try_clone(&pool).unwrap();
    burst.push(clone).unwrap();

    assert_eq!(gro.reassemble(&mut burst), 1);
    assert_eq!(burst.len(), 2);
    for m in burst.as_slice() {
        assert_eq!(m.packet_type(), ptype::ETHER_IPV4_TCP, "type restored");
        assert_eq!(m.header_lens(), (ETH_LEN, IP_LEN, TCP_LEN));
    }
    assert_eq!(burst.as_slice()[0].to_vec(), &good[..30]);
    drop((burst, original));
    drop(gro);
    assert_no_leaks(&pool);
}

#[test]
fn dropping_the_context_frees_what_it_holds() {
    let pool = pool(256, 2048 + 128);
    let mut gro = GroContext::new(eal(), 64, 4).unwrap();
    let mut burst = Burst::<32>::new();
    for flow in 0..32u16 {
        let frame = tcp_frame(30000 + flow, 0, 1, &pattern(500, 0));
        burst.push(tcp_mbuf(&pool, &frame)).unwrap();
    }
    for round in 0..3u32 {
        assert_eq!(gro.reassemble(&mut burst), 32);
        for flow in 0..32u16 {
            let frame = tcp_frame(30000 + flow, 500 * (round + 1), 1, &pattern(500, 0));
            burst.push(tcp_mbuf(&pool, &frame)).unwrap();
        }
    }
    assert_eq!(gro.item_count(), 32, "three segments merged per flow");
    assert_eq!(pool.in_use(), 32 * 4);
    drop(gro);
    drop(burst);
    assert_no_leaks(&pool);
}

#[test]
fn zero_sizes_are_refused() {
    assert!(GroContext::new(eal(), 0, 8).is_err());
    assert!(GroContext::new(eal(), 8, 0).is_err());
}
