//! The gateway as a router for what it cannot split, on heap buffers: oversize IPv4 with DF gets
//! one "fragmentation needed", without DF is fragmented (the test reassembles it), oversize IPv6
//! gets a Packet Too Big, errors are rate-limited; a Packet Too Big from outside caps the next
//! split; repeated retransmissions of a split IPv6 segment fall back to 1280; an ICMP error for
//! the gateway's own probe never reaches the inside host.

mod common;

use common::{FROM_INSIDE, FROM_OUTSIDE};

use etherparse::{
    Icmpv4Type, Icmpv6Type, IpHeaders, IpNumber, Ipv4Header, Ipv4Options, NetSlice, PacketBuilder,
    SlicedPacket, TransportSlice,
};
use pxgw::pipeline::Pipeline;
use pxgw::pmtud::PROBE_SOURCE_PORT;
use pxio::wire::{self, tcp_flags, IcmpRepr, IpRepr, Ipv4Repr, Ipv6Repr, TcpRepr, UdpRepr};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const INSIDE: [u8; 4] = [198, 18, 8, 2];
const OUTSIDE: [u8; 4] = [198, 51, 100, 7];
const INSIDE6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const OUTSIDE6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
const EMTU: u16 = 1400;

fn pipeline(extra: &str) -> Pipeline<HeapBuf> {
    common::pipeline_with(&format!("mtu = {EMTU}\n"), extra)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn udp4(df: bool, payload: &[u8]) -> Vec<u8> {
    let ip = IpRepr::V4(Ipv4Repr {
        dont_frag: df,
        ident: 0x4242,
        ..Ipv4Repr::new(INSIDE, OUTSIDE)
    });
    let udp = UdpRepr {
        src_port: 40000,
        dst_port: 9,
    };
    wire::udp_frame(FROM_INSIDE, ip, udp, payload).unwrap()
}

fn udp6(src: [u8; 16], payload: &[u8]) -> Vec<u8> {
    let ip = IpRepr::V6(Ipv6Repr::new(src, OUTSIDE6));
    let udp = UdpRepr {
        src_port: 40000,
        dst_port: 9,
    };
    wire::udp_frame(FROM_INSIDE, ip, udp, payload).unwrap()
}

fn tcp6(inbound: bool, seq: u32, flags: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let (eth, src, dst, sport, dport) = if inbound {
        (FROM_OUTSIDE, OUTSIDE6, INSIDE6, 443, 50000)
    } else {
        (FROM_INSIDE, INSIDE6, OUTSIDE6, 50000, 443)
    };
    let tcp = TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq,
        ack: 1,
        flags,
        window: 65000,
        urgent: 0,
        options,
    };
    wire::tcp_frame(eth, IpRepr::V6(Ipv6Repr::new(src, dst)), tcp, payload).unwrap()
}

fn outbound(px: &mut Pipeline<HeapBuf>, pool: &HeapPool, frame: &[u8], now: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    px.outbound(pool.packet(frame), now, &mut out);
    out.iter().map(PacketBuf::to_vec).collect()
}

fn inside_replies(px: &mut Pipeline<HeapBuf>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    px.take_inside_replies(&mut out);
    out.iter().map(PacketBuf::to_vec).collect()
}

/// The ICMPv4 message of `frame`: (IP source, IP destination, type, payload), checksums checked.
fn icmp4_of(frame: &[u8]) -> ([u8; 4], [u8; 4], Icmpv4Type, Vec<u8>) {
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4")
    };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum(), "IP checksum");
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("not ICMPv4")
    };
    assert_eq!(
        icmp.checksum(),
        icmp.icmp_type().calc_checksum(icmp.payload()),
        "ICMP checksum"
    );
    (
        h.source,
        h.destination,
        icmp.icmp_type(),
        icmp.payload().to_vec(),
    )
}

#[test]
fn an_oversize_datagram_with_df_gets_one_frag_needed_with_the_emtu_and_a_576_byte_quote() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    let frame = udp4(true, &pattern(3000));
    // A chained buffer: the quote must cross segments.
    let parts: Vec<&[u8]> = vec![&frame[..60], &frame[60..333], &frame[333..]];
    let mut out = Vec::new();
    px.outbound(HeapBuf::from_segments(&pool, &parts), 1_000, &mut out);
    assert!(out.is_empty(), "the packet does not leave");
    let replies = inside_replies(&mut px);
    assert_eq!(replies.len(), 1, "exactly one error");
    let reply = &replies[0];
    assert_eq!(&reply[..6], &FROM_INSIDE.src, "back to the sender's MAC");
    assert_eq!(&reply[6..12], &FROM_INSIDE.dst, "from the next hop's MAC");
    let (src, dst, ty, quote) = icmp4_of(reply);
    assert_eq!(
        (src, dst),
        (OUTSIDE, INSIDE),
        "from the destination, to the sender"
    );
    assert_eq!(
        ty,
        Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: EMTU }
        )
    );
    assert_eq!(reply.len() - 14, 576, "RFC 1812: as much as fits in 576 B");
    assert_eq!(quote, frame[14..14 + 548], "the original IP packet's start");
    let r = px.report();
    assert_eq!((r.drops.oversize, r.router.frag_needed_sent), (1, 1));
}

#[test]
fn a_configured_source_address_is_used() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("[icmp]\nsource_v4 = \"198.18.0.1\"\n");
    outbound(&mut px, &pool, &udp4(true, &pattern(2000)), 0);
    let replies = inside_replies(&mut px);
    let (src, dst, _, _) = icmp4_of(&replies[0]);
    assert_eq!((src, dst), ([198, 18, 0, 1], INSIDE));
}

/// Reassembles IPv4 fragments (any order): the checked header fields and the payload.
fn reassemble(frags: &[Vec<u8>]) -> (u16, Vec<u8>) {
    let mut pieces: Vec<(usize, bool, Vec<u8>, u16)> = frags
        .iter()
        .map(|f| {
            let h = Ipv4Header::from_slice(&f[14..]).unwrap().0;
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "header checksum"
            );
            assert!(
                usize::from(h.total_len) <= usize::from(EMTU),
                "fits the eMTU"
            );
            let hl = h.header_len();
            let body = f[14 + hl..14 + usize::from(h.total_len)].to_vec();
            let off = usize::from(h.fragment_offset.value()) * 8;
            (off, h.more_fragments, body, h.identification)
        })
        .collect();
    pieces.sort_by_key(|p| p.0);
    let mut data = Vec::new();
    for (i, (off, mf, body, id)) in pieces.iter().enumerate() {
        assert_eq!(*off, data.len(), "no gap, no overlap");
        assert_eq!(*mf, i + 1 < pieces.len(), "MF on all but the last");
        assert_eq!(*id, pieces[0].3, "one identification");
        if i + 1 < pieces.len() {
            assert_eq!(body.len() % 8, 0, "fragment payloads are multiples of 8");
        }
        data.extend_from_slice(body);
    }
    (pieces[0].3, data)
}

#[test]
fn an_oversize_datagram_without_df_is_fragmented_and_reassembles_to_the_original() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    let frame = udp4(false, &pattern(3000));
    let parts: Vec<&[u8]> = vec![
        &frame[..50],
        &frame[50..1001],
        &frame[1001..2999],
        &frame[2999..],
    ];
    let mut out = Vec::new();
    px.outbound(HeapBuf::from_segments(&pool, &parts), 0, &mut out);
    let frags: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    assert_eq!(frags.len(), 3, "3028 B of IP payload in 1376 B pieces");
    let (id, data) = reassemble(&frags);
    assert_eq!(id, 0x4242);
    assert_eq!(data, frame[34..], "the UDP datagram, byte for byte");
    assert!(inside_replies(&mut px).is_empty(), "no error for DF clear");
    let r = px.report();
    assert_eq!((r.router.fragmented, r.router.fragments_out), (1, 3));
    assert_eq!(r.drops.oversize, 0);
    drop(out);
    assert_eq!(pool.in_use(), 0, "no segment leaked");
}

#[test]
fn options_are_copied_into_later_fragments_only_when_their_copy_flag_says_so() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    // Record route (7, not copied), then router alert (0x94, copied), then end of list.
    let options = [7, 7, 4, 0, 0, 0, 0, 0x94, 4, 0, 0, 0];
    let mut h = Ipv4Header::new(0, 64, IpNumber::UDP, INSIDE, OUTSIDE).unwrap();
    h.identification = 77;
    h.dont_fragment = false;
    h.options = Ipv4Options::try_from(&options[..]).unwrap();
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(FROM_INSIDE.src, FROM_INSIDE.dst)
        .ip(IpHeaders::Ipv4(h, Default::default()))
        .udp(40000, 9)
        .write(&mut frame, &pattern(2500))
        .unwrap();
    let frags = outbound(&mut px, &pool, &frame, 0);
    assert!(frags.len() >= 2);
    let first = Ipv4Header::from_slice(&frags[0][14..]).unwrap().0;
    assert_eq!(
        first.options.as_slice(),
        &options[..],
        "all options in the first"
    );
    for f in &frags[1..] {
        let h = Ipv4Header::from_slice(&f[14..]).unwrap().0;
        assert_eq!(
            h.options.as_slice(),
            &[0x94, 4, 0, 0],
            "only the copied option"
        );
    }
    let (_, data) = reassemble(&frags);
    assert_eq!(data, frame[14 + 32..]);
}

#[test]
fn an_oversize_ipv6_packet_gets_a_packet_too_big_quoting_up_to_1280_bytes() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    let frame = udp6(INSIDE6, &pattern(3000));
    assert!(outbound(&mut px, &pool, &frame, 0).is_empty());
    let replies = inside_replies(&mut px);
    assert_eq!(replies.len(), 1);
    let p = SlicedPacket::from_ethernet(&replies[0]).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("IPv6")
    };
    assert_eq!(
        (ip.header().source(), ip.header().destination()),
        (OUTSIDE6, INSIDE6)
    );
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("ICMPv6")
    };
    assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1400 });
    let sum = icmp
        .icmp_type()
        .calc_checksum(OUTSIDE6, INSIDE6, icmp.payload())
        .unwrap();
    assert_eq!(icmp.checksum(), sum, "ICMPv6 checksum");
    assert_eq!(replies[0].len() - 14, 1280, "the minimum MTU, filled");
    assert_eq!(icmp.payload(), &frame[14..14 + 1232]);
    assert_eq!(px.report().router.ptb_sent, 1);
}

#[test]
fn errors_are_rate_limited_per_destination_and_globally() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    // Ten in one millisecond to one sender: the burst of 6 goes, 4 are held back.
    for i in 0..10 {
        outbound(
            &mut px,
            &pool,
            &udp4(true, &pattern(2000)),
            1_000 + i * 100_000,
        );
    }
    assert_eq!(inside_replies(&mut px).len(), 6);
    let r = px.report().router;
    assert_eq!((r.frag_needed_sent, r.icmp_rate_limited), (6, 4));
    assert_eq!(
        px.report().drops.oversize,
        10,
        "every packet is still counted"
    );
    // A second later one more token is there.
    outbound(&mut px, &pool, &udp4(true, &pattern(2000)), 1_001_000_000);
    outbound(&mut px, &pool, &udp4(true, &pattern(2000)), 1_001_100_000);
    assert_eq!(inside_replies(&mut px).len(), 1);

    // Globally: 60 senders at once, the global burst of 50 holds.
    let mut px = pipeline("");
    for i in 0..60u8 {
        let mut src = INSIDE6;
        src[15] = i + 10;
        outbound(&mut px, &pool, &udp6(src, &pattern(2000)), 5_000);
    }
    assert_eq!(inside_replies(&mut px).len(), 50);
    assert_eq!(px.report().router.icmp_rate_limited, 10);
}

/// MSS 1440 option.
const MSS_1440: &[u8] = &[2, 4, 0x05, 0xa0];

/// An IPv6 connection the gateway saw open: inside SYN, outside SYN-ACK (MSS 1440 → 1500 hint,
/// capped at the eMTU 1400).
fn v6_connection(px: &mut Pipeline<HeapBuf>, pool: &HeapPool) {
    outbound(px, pool, &tcp6(false, 0, tcp_flags::SYN, MSS_1440, &[]), 0);
    let mut to_int = Vec::new();
    px.inbound(
        pool.packet(&tcp6(
            true,
            0,
            tcp_flags::SYN | tcp_flags::ACK,
            MSS_1440,
            &[],
        )),
        1,
        &mut to_int,
    );
}

fn ip6_lens(frames: &[Vec<u8>]) -> Vec<usize> {
    frames.iter().map(|f| f.len() - 14).collect()
}

#[test]
fn a_packet_too_big_from_outside_caps_the_next_split_and_is_forwarded_unchanged() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    v6_connection(&mut px, &pool);
    let segs = outbound(
        &mut px,
        &pool,
        &tcp6(false, 1, tcp_flags::ACK, &[], &pattern(8000)),
        10,
    );
    assert!(ip6_lens(&segs).iter().all(|&l| l <= 1400));
    assert_eq!(ip6_lens(&segs)[0], 1400, "split to the eMTU first");

    // A router behind says 1300, quoting the first split segment.
    let ptb_ip = IpRepr::V6(Ipv6Repr::new(
        [0x20, 1, 0x0d, 0xb8, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        INSIDE6,
    ));
    let ptb = wire::icmp_frame(
        FROM_OUTSIDE,
        ptb_ip,
        IcmpRepr::packet_too_big(1300),
        &segs[0][14..14 + 1232],
    )
    .unwrap();
    let mut to_int = Vec::new();
    px.inbound(pool.packet(&ptb), 20, &mut to_int);
    assert_eq!(to_int.len(), 1, "the host gets the PTB");
    assert_eq!(to_int[0].to_vec(), ptb, "unchanged");
    assert_eq!(px.report().router.ptb_learned, 1);

    let segs = outbound(
        &mut px,
        &pool,
        &tcp6(false, 8001, tcp_flags::ACK, &[], &pattern(8000)),
        30,
    );
    let lens = ip6_lens(&segs);
    assert_eq!(lens[0], 1300, "capped at what the PTB said: {lens:?}");
    assert!(lens.iter().all(|&l| l <= 1300));

    // A PTB for a connection the gateway does not know is only forwarded.
    let mut other = segs[0][14..14 + 1232].to_vec();
    other[40..42].copy_from_slice(&12345u16.to_be_bytes()); // another source port
    let ptb =
        wire::icmp_frame(FROM_OUTSIDE, ptb_ip, IcmpRepr::packet_too_big(1280), &other).unwrap();
    let mut to_int = Vec::new();
    px.inbound(pool.packet(&ptb), 40, &mut to_int);
    assert_eq!(to_int.len(), 1);
    assert_eq!(px.report().router.ptb_learned, 1, "not learned");
}

#[test]
fn repeated_retransmissions_of_a_split_segment_fall_back_to_1280() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    v6_connection(&mut px, &pool);
    let ms = 1_000_000;
    let seg = |k: u32| tcp6(false, 1 + k * 8000, tcp_flags::ACK, &[], &pattern(8000));
    // A window of three segments, then, on each timeout, the whole window again (what Linux
    // does when none of it is acknowledged): the head segment is retransmitted each round.
    for k in 0..3 {
        assert_eq!(
            ip6_lens(&outbound(&mut px, &pool, &seg(k), 10 * ms))[0],
            1400
        );
    }
    for k in 0..3 {
        let lens = ip6_lens(&outbound(&mut px, &pool, &seg(k), 300 * ms));
        assert_eq!(lens[0], 1400, "first retransmission round");
    }
    let lens = ip6_lens(&outbound(&mut px, &pool, &seg(0), 900 * ms));
    assert_eq!(
        lens[0], 1280,
        "second retransmission of the head: a black hole"
    );
    assert!(lens.iter().all(|&l| l <= 1280));
    assert_eq!(px.report().router.blackhole_fallbacks, 1);
    // The rest of the window, and new data, go at 1280 too, and nothing fires again.
    for k in [1, 2, 3] {
        let lens = ip6_lens(&outbound(&mut px, &pool, &seg(k), 1000 * ms));
        assert!(lens.iter().all(|&l| l <= 1280), "{lens:?}");
    }
    assert_eq!(px.report().router.blackhole_fallbacks, 1);
}

#[test]
fn ordinary_traffic_and_ordinary_loss_do_not_look_like_a_black_hole() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    v6_connection(&mut px, &pool);
    let ms = 1_000_000;
    let mut seq = 1u32;
    for i in 0..50u64 {
        outbound(
            &mut px,
            &pool,
            &tcp6(false, seq, tcp_flags::ACK, &[], &pattern(8000)),
            i * ms,
        );
        seq += 8000;
    }
    // Loss recovery: several different segments retransmitted once each, one twice but
    // outside the window.
    for (k, t) in [(3u32, 60), (7, 61), (9, 62), (3, 20_000)] {
        let seg = tcp6(false, 1 + k * 8000, tcp_flags::ACK, &[], &pattern(8000));
        let lens = ip6_lens(&outbound(&mut px, &pool, &seg, t * ms));
        assert_eq!(lens[0], 1400);
    }
    assert_eq!(px.report().router.blackhole_fallbacks, 0);
}

#[test]
fn probes_go_only_to_connections_inside_hosts_open_and_errors_for_them_are_consumed() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    let v4 = |flags: u8| {
        let tcp = TcpRepr {
            src_port: 50000,
            dst_port: 443,
            seq: 0,
            ack: 0,
            flags,
            window: 65000,
            urgent: 0,
            options: &[],
        };
        wire::tcp_frame(
            FROM_INSIDE,
            IpRepr::V4(Ipv4Repr::new(INSIDE, OUTSIDE)),
            tcp,
            &[],
        )
        .unwrap()
    };
    // An inside server answering: no probe.
    outbound(&mut px, &pool, &v4(tcp_flags::SYN | tcp_flags::ACK), 0);
    let mut replies = Vec::new();
    px.take_replies(&mut replies);
    assert!(
        replies.is_empty(),
        "a SYN-ACK from inside is not probed for"
    );
    assert_eq!(px.report().pmtud.probed, 0);
    // An inside client opening: one probe.
    outbound(&mut px, &pool, &v4(tcp_flags::SYN), 1);
    px.take_replies(&mut replies);
    assert_eq!(replies.len(), 1);
    let probe = replies[0].to_vec();
    let p = SlicedPacket::from_ethernet(&probe).unwrap();
    let Some(TransportSlice::Udp(u)) = &p.transport else {
        panic!("UDP probe")
    };
    assert!(u.source_port() >= PROBE_SOURCE_PORT, "a probe source port");
    assert_eq!(u.destination_port(), fpmtud::DEFAULT_PORT);

    // The outside host has no responder: its port unreachable quotes the (reassembled) probe.
    let unreachable = |quoted: &[u8]| {
        let ip = IpRepr::V4(Ipv4Repr::new(OUTSIDE, INSIDE));
        let icmp = IcmpRepr {
            msg_type: 3,
            code: 3,
            rest: 0,
        };
        pool.packet(&wire::icmp_frame(FROM_OUTSIDE, ip, icmp, quoted).unwrap())
    };
    let mut to_int = Vec::new();
    px.inbound(unreachable(&probe[14..14 + 28]), 2, &mut to_int);
    assert!(to_int.is_empty(), "the inside host never sent that probe");
    assert_eq!(px.report().router.probe_errors_consumed, 1);

    // A port unreachable for the host's own datagram still reaches it.
    let own = udp4(true, &pattern(100));
    px.inbound(unreachable(&own[14..14 + 28]), 3, &mut to_int);
    assert_eq!(to_int.len(), 1);
    assert_eq!(px.report().router.probe_errors_consumed, 1);
}

#[test]
fn malformed_options_are_refused_and_counted_not_guessed_at() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline("");
    // An option whose length runs past the header.
    let options = [0x83, 9, 4, 0];
    let mut h = Ipv4Header::new(0, 64, IpNumber::UDP, INSIDE, OUTSIDE).unwrap();
    h.dont_fragment = false;
    h.options = Ipv4Options::try_from(&options[..]).unwrap();
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(FROM_INSIDE.src, FROM_INSIDE.dst)
        .ip(IpHeaders::Ipv4(h, Default::default()))
        .udp(40000, 9)
        .write(&mut frame, &pattern(2500))
        .unwrap();
    assert!(outbound(&mut px, &pool, &frame, 0).is_empty());
    let r = px.report();
    assert_eq!((r.router.fragment_failed, r.drops.oversize), (1, 1));
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn the_per_destination_table_is_bounded() {
    let pool = HeapPool::new(4096);
    let mut px =
        pipeline("[icmp]\nmax_destinations = 4\nmsgs_burst = 1000\nmsgs_per_sec = 100000\n");
    for i in 0..10u8 {
        let mut src = INSIDE6;
        src[15] = i + 10;
        outbound(&mut px, &pool, &udp6(src, &pattern(2000)), 5_000);
    }
    // Four senders are tracked (their buckets are not full again yet); the rest are refused.
    assert_eq!(inside_replies(&mut px).len(), 4);
    assert_eq!(px.report().router.icmp_rate_limited, 6);
    // Once their buckets refilled, new senders get room.
    let mut src = INSIDE6;
    src[15] = 99;
    outbound(&mut px, &pool, &udp6(src, &pattern(2000)), 60_000_000_000);
    assert_eq!(inside_replies(&mut px).len(), 1);
}
