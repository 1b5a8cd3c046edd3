//! `rte_gso` through the safe wrapper, on a real EAL: a long TCP/IPv4 packet (one `rte_gro`
//! merged, or a chain built by hand) comes out as packets no longer than the GSO size, whose
//! headers are right and whose payloads concatenate to the input's; bad input comes back
//! unchanged with an error; nothing leaks from any of the three pools.

use dpdk::testing::{assert_no_leaks, eal, pool};
use dpdk::{ptype, Burst, Error, GroContext, GsoContext, Mbuf, Mempool};
use etherparse::{PacketBuilder, SlicedPacket, TcpOptionElement, TransportSlice};
use proptest::prelude::*;

const ETH_LEN: u8 = 14;
const IP_LEN: u16 = 20;
/// TCP header with NOP, NOP, time stamps.
const TCP_LEN: u8 = 32;
const HDRS: usize = ETH_LEN as usize + IP_LEN as usize + TCP_LEN as usize;
const MSS: usize = 1448;

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ salt).collect()
}

/// An Ethernet/IPv4/TCP frame (bare ACK, time stamps) carrying `payload` from `seq`.
fn tcp_frame(seq: u32, ip_id: u16, payload: &[u8]) -> Vec<u8> {
    let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ipv4([198, 18, 0, 1], [10, 0, 0, 2], 64)
        .tcp(40000, 5201, seq, 512)
        .ack(77)
        .options(&[
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
            TcpOptionElement::Timestamp(5, 9),
        ])
        .unwrap();
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut frame, payload).unwrap();
    frame[18..20].copy_from_slice(&ip_id.to_be_bytes());
    frame
}

/// `frame` spread over a chain of mbufs of `pool`, at most `per_seg` bytes each (the first one
/// holds at least the headers), typed and with its header lengths set.
fn chained(pool: &Mempool, frame: &[u8], per_seg: usize) -> Mbuf {
    let mut parts = frame.chunks(per_seg);
    let mut head = pool.alloc().unwrap();
    head.extend_from_slice(parts.next().unwrap()).unwrap();
    for part in parts {
        let mut m = pool.alloc().unwrap();
        m.extend_from_slice(part).unwrap();
        head.chain(m).map_err(|(e, _)| e).unwrap();
    }
    head.set_packet_type(ptype::ETHER_IPV4_TCP);
    head.set_header_lens(ETH_LEN, IP_LEN, TCP_LEN);
    head
}

struct Pools {
    pkts: std::sync::Arc<Mempool>,
    direct: std::sync::Arc<Mempool>,
    indirect: std::sync::Arc<Mempool>,
}

impl Pools {
    fn new(direct: u32) -> Self {
        eal();
        Self {
            pkts: pool(128, 2048 + 128),
            direct: pool(direct, 256),
            indirect: pool(256, 0),
        }
    }

    fn assert_no_leaks(&self) {
        assert_no_leaks(&self.pkts);
        assert_no_leaks(&self.direct);
        assert_no_leaks(&self.indirect);
    }
}

/// Checks that `outs` are well-formed TCP/IPv4 packets of at most `max_len` bytes that carry
/// `payload` from `seq`, with IDs counting up from `ip_id` and neither PSH nor FIN.
fn check_outputs(outs: &[Mbuf], max_len: usize, seq: u32, ip_id: u16, payload: &[u8]) {
    let mut stream = Vec::new();
    for (i, m) in outs.iter().enumerate() {
        assert!(
            m.len() <= max_len,
            "output {i} is {} B > {max_len}",
            m.len()
        );
        let bytes = m.to_vec();
        let p = SlicedPacket::from_ethernet(&bytes).unwrap();
        let ip = match p.net.unwrap() {
            etherparse::NetSlice::Ipv4(ip) => ip,
            other => panic!("output {i} is not IPv4: {other:?}"),
        };
        assert_eq!(
            usize::from(ip.header().total_len()),
            bytes.len() - usize::from(ETH_LEN),
            "output {i}'s IPv4 total length"
        );
        assert_eq!(ip.header().identification(), ip_id.wrapping_add(i as u16));
        let Some(TransportSlice::Tcp(tcp)) = p.transport else {
            panic!("output {i} is not TCP");
        };
        assert_eq!(
            tcp.sequence_number(),
            seq.wrapping_add(stream.len() as u32),
            "output {i}'s sequence number"
        );
        assert!(
            !tcp.psh() && !tcp.fin(),
            "output {i}: no PSH or FIN was set"
        );
        assert_eq!(tcp.acknowledgment_number(), 77);
        stream.extend_from_slice(tcp.payload());
    }
    assert!(stream == payload, "the outputs' payloads are the input's");
}

#[test]
fn a_long_chain_is_cut_into_bounded_packets_that_carry_its_bytes() {
    let pools = Pools::new(64);
    let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, 9000 + 14).unwrap();
    assert_eq!(gso.max_len(), 9014);
    let payload = pattern(45 * MSS, 7);
    let frame = tcp_frame(1_000_000, 300, &payload);
    // Segments of 1514 B, as a merged TSO burst's would be.
    let pkt = chained(&pools.pkts, &frame, HDRS + MSS);
    assert_eq!(pkt.num_segs(), frame.len().div_ceil(HDRS + MSS));
    let mut out = Vec::new();
    let n = gso.segment(pkt, &mut out).unwrap();
    // 65160 B of payload in units of 9014 - 66 = 8948 B.
    assert_eq!(n, 8);
    assert_eq!(out.len(), 8);
    check_outputs(&out, 9014, 1_000_000, 300, &payload);
    // Every output but the last is full.
    assert!(out[..7].iter().all(|m| m.len() == 9014));
    drop(out);
    pools.assert_no_leaks();
}

#[test]
fn what_rte_gro_merges_rte_gso_cuts_back_to_the_mtu() {
    let pools = Pools::new(64);
    let mut gro = GroContext::new(eal(), 4, 32).unwrap();
    let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, 4000 + 14).unwrap();
    let payload = pattern(20 * MSS, 3);
    let mut burst = Burst::<32>::new();
    for (k, part) in payload.chunks(MSS).enumerate() {
        let mut m = pools.pkts.alloc().unwrap();
        m.extend_from_slice(&tcp_frame(5000 + (k * MSS) as u32, 10 + k as u16, part))
            .unwrap();
        m.parse_packet_type();
        burst.push(m).unwrap();
    }
    assert_eq!(gro.reassemble(&mut burst), 20);
    let mut merged = Burst::<32>::new();
    assert_eq!(gro.timeout_flush(0, &mut merged), 1);
    let mut out = Vec::new();
    for m in merged.drain() {
        assert_eq!(m.len(), HDRS + 20 * MSS, "rte_gro merged all 20");
        gso.segment(m, &mut out).unwrap();
    }
    // 28960 B in units of 4014 - 66 = 3948 B.
    assert_eq!(out.len(), 8);
    check_outputs(&out, 4014, 5000, 10, &payload);
    drop(out);
    drop(gro);
    pools.assert_no_leaks();
}

#[test]
fn short_packets_and_fragments_pass_as_they_are() {
    let pools = Pools::new(8);
    let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, 1514).unwrap();
    let mut out = Vec::new();
    let short = chained(&pools.pkts, &tcp_frame(1, 1, &pattern(MSS, 1)), 2048);
    let short_ptr = short.as_ptr();
    assert_eq!(gso.segment(short, &mut out).unwrap(), 1);
    assert_eq!(out[0].as_ptr(), short_ptr, "the same packet, untouched");
    // An IPv4 first fragment (MF set) longer than the size: GSO does not cut fragments.
    let mut frame = tcp_frame(1, 2, &pattern(3000, 2));
    frame[20] |= 0x20;
    let frag = chained(&pools.pkts, &frame, 2000);
    let frag_ptr = frag.as_ptr();
    let flags = frag.ol_flags();
    assert_eq!(gso.segment(frag, &mut out).unwrap(), 1);
    assert_eq!(out[1].as_ptr(), frag_ptr);
    assert_eq!(out[1].ol_flags(), flags, "its flags restored");
    assert_eq!(out[1].len(), frame.len());
    drop(out);
    pools.assert_no_leaks();
}

#[test]
fn bad_header_lengths_hand_the_packet_back_unchanged() {
    let pools = Pools::new(8);
    let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, 1514).unwrap();
    let frame = tcp_frame(1, 1, &pattern(4000, 5));
    let mut out = Vec::new();
    for (lens, what) in [
        ((0, IP_LEN, TCP_LEN), "no Ethernet length"),
        ((ETH_LEN, 0, TCP_LEN), "no IPv4 length"),
        ((ETH_LEN, IP_LEN, 8), "a TCP header shorter than 20 B"),
        ((ETH_LEN, IP_LEN, 64), "a TCP header longer than 60 B"),
        ((ETH_LEN, 400, 60), "headers beyond the first segment"),
    ] {
        // First segment of 200 B: the last case's 474 B of headers do not fit it.
        let mut pkt = chained(&pools.pkts, &frame, 200);
        pkt.set_header_lens(lens.0, lens.1, lens.2);
        let flags = pkt.ol_flags();
        let (err, back) = gso.segment(pkt, &mut out).unwrap_err();
        assert!(out.is_empty(), "{what}: nothing pushed");
        assert_eq!(back.to_vec(), frame, "{what}: bytes unchanged");
        assert_eq!(back.ol_flags(), flags, "{what}: flags unchanged");
        assert!(
            matches!(err, Error::InvalidArgument(_) | Error::NoRoom { .. }),
            "{what}: {err}"
        );
    }
    pools.assert_no_leaks();
}

#[test]
fn headers_that_do_not_fit_the_header_mbufs_or_the_size_are_refused() {
    let pools = Pools::new(8);
    // Header mbufs of 128 + 40 B: too small for 66 B of headers.
    let tiny = pool(8, 128 + 40);
    let gso = GsoContext::tcp4(&tiny, &pools.indirect, 1514).unwrap();
    let frame = tcp_frame(1, 1, &pattern(4000, 5));
    let mut out = Vec::new();
    let (err, back) = gso
        .segment(chained(&pools.pkts, &frame, 2048), &mut out)
        .unwrap_err();
    assert!(matches!(err, Error::NoRoom { .. }), "{err}");
    assert_eq!(back.to_vec(), frame);
    // A size that the headers alone fill.
    let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, 60).unwrap();
    let (err, back) = gso.segment(back, &mut out).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    drop(back);
    assert!(GsoContext::tcp4(&pools.direct, &pools.indirect, 54).is_err());
    assert_no_leaks(&tiny);
    pools.assert_no_leaks();
}

#[test]
fn an_exhausted_header_pool_hands_the_packet_back_and_leaks_nothing() {
    // Two header mbufs for a packet that needs eight.
    let pools = Pools::new(2);
    let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, 9014).unwrap();
    let payload = pattern(45 * MSS, 9);
    let frame = tcp_frame(7, 7, &payload);
    let mut out = Vec::new();
    let (err, back) = gso
        .segment(chained(&pools.pkts, &frame, HDRS + MSS), &mut out)
        .unwrap_err();
    assert!(matches!(err, Error::PoolExhausted(_)), "{err}");
    assert!(out.is_empty());
    assert_eq!(back.to_vec(), frame, "the packet is intact");
    assert_eq!(
        pools.direct.in_use(),
        0,
        "the pieces made before it ran out are freed"
    );
    assert_eq!(pools.indirect.in_use(), 0);
    drop(back);
    pools.assert_no_leaks();
}

/// Pools for the property test: up to 20 KB of payload in segments of at least 100 B, cut into
/// pieces of at least 64 B of payload.
fn prop_pools() -> Pools {
    eal();
    Pools {
        pkts: pool(512, 2048 + 128),
        direct: pool(512, 256),
        indirect: pool(1024, 0),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any packet, spread over any segment layout, cut to any size: every output fits the
    /// size and has the right headers, the payloads concatenate to the input's, a packet that
    /// fits comes back untouched, and nothing leaks.
    #[test]
    fn any_chain_is_cut_into_bounded_pieces_that_carry_its_bytes(
        payload_len in 1usize..20_000,
        unit in 64usize..9_000,
        per_seg in 100usize..2_048,
        seq: u32,
        ip_id: u16,
        salt: u8,
    ) {
        let pools = prop_pools();
        let max_len = HDRS + unit;
        let gso = GsoContext::tcp4(&pools.direct, &pools.indirect, max_len as u16).unwrap();
        let payload = pattern(payload_len, salt);
        let frame = tcp_frame(seq, ip_id, &payload);
        let pkt = chained(&pools.pkts, &frame, per_seg);
        let first = pkt.as_ptr();
        let mut out = Vec::new();
        let n = gso.segment(pkt, &mut out).unwrap();
        prop_assert_eq!(n, out.len());
        if frame.len() <= max_len {
            prop_assert_eq!(n, 1);
            prop_assert_eq!(out[0].as_ptr(), first);
            prop_assert_eq!(out[0].to_vec(), frame);
        } else {
            prop_assert_eq!(n, payload_len.div_ceil(unit));
            check_outputs(&out, max_len, seq, ip_id, &payload);
        }
        drop(out);
        pools.assert_no_leaks();
    }
}
