//! Inbound packets larger than the internal MTU: reassembled fragments of up to 10,174 B must not
//! be sent into a 9000 B network (nor counted as sent). The inbound path checks the iMTU as the
//! outbound path checks the eMTU, and acts as a router in front of the b-network would: IPv4 with
//! DF clear is fragmented to the iMTU, IPv4 with DF set is dropped and answered with
//! "fragmentation needed" (next-hop MTU = the iMTU), IPv6 with a Packet Too Big, toward the
//! outside sender, rate-limited; every drop is counted. TCP above the iMTU is a coalesced run of
//! segments instead (LRO, GRO), cut at the iMTU: `tests/coalesced.rs`.

mod common;

use common::FROM_OUTSIDE;

use etherparse::{Icmpv4Type, Icmpv6Type, Ipv4Header, NetSlice, SlicedPacket, TransportSlice};
use pxgw::pipeline::Pipeline;
use pxio::wire::{self, IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const IMTU: u16 = 9000;
const OUTSIDE: [u8; 4] = [198, 51, 100, 7];
const INSIDE: [u8; 4] = [198, 18, 8, 2];
const OUTSIDE6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
const INSIDE6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// A large reassembled packet as the outside delivers them: a 10,174 B frame.
const BIG_PAYLOAD: usize = 10_174 - 14 - 20 - 8;

fn pipeline() -> Pipeline<HeapBuf> {
    common::pipeline_with("", "")
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn udp4(df: bool, payload: &[u8]) -> Vec<u8> {
    let ip = IpRepr::V4(Ipv4Repr {
        dont_frag: df,
        ident: 0x4242,
        ..Ipv4Repr::new(OUTSIDE, INSIDE)
    });
    let udp = UdpRepr {
        src_port: 443,
        dst_port: 40000,
    };
    wire::udp_frame(FROM_OUTSIDE, ip, udp, payload).unwrap()
}

fn udp6(payload: &[u8]) -> Vec<u8> {
    let udp = UdpRepr {
        src_port: 443,
        dst_port: 40000,
    };
    wire::udp_frame(
        FROM_OUTSIDE,
        IpRepr::V6(Ipv6Repr::new(OUTSIDE6, INSIDE6)),
        udp,
        payload,
    )
    .unwrap()
}

/// Feeds `frame` inbound and lets everything held go: what went inside, and what the gateway
/// sends outside.
fn inbound(px: &mut Pipeline<HeapBuf>, frame: &[u8], now: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    px.inbound(pool.packet(frame), now, &mut out);
    px.end_of_burst(now, &mut out);
    px.flush(now, &mut out);
    let mut replies = Vec::new();
    px.take_replies(&mut replies);
    let v = |b: &[HeapBuf]| b.iter().map(PacketBuf::to_vec).collect::<Vec<_>>();
    let got = (v(&out), v(&replies));
    drop((out, replies));
    assert_eq!(pool.in_use(), 0, "nothing leaked");
    got
}

fn ip_len(frame: &[u8]) -> usize {
    frame.len() - 14
}

#[test]
fn an_ipv4_packet_with_df_above_the_imtu_is_dropped_and_answered() {
    for frame in [
        udp4(true, &pattern(BIG_PAYLOAD)),
        udp4(true, &pattern(9100)),
    ] {
        let mut px = pipeline();
        let (inside, outside) = inbound(&mut px, &frame, 1_000);
        assert!(
            inside.is_empty(),
            "nothing above the iMTU goes inside: {:?}",
            inside.iter().map(|f| ip_len(f)).collect::<Vec<_>>()
        );
        assert_eq!(outside.len(), 1, "one error to the sender");
        let p = SlicedPacket::from_ethernet(&outside[0]).unwrap();
        let Some(NetSlice::Ipv4(ip)) = &p.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.header().destination(), OUTSIDE, "to the outside sender");
        let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
            panic!("not ICMP")
        };
        assert_eq!(
            icmp.icmp_type(),
            Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: IMTU
                }
            )
        );
        assert_eq!(&icmp.payload()[..28], &frame[14..42], "quotes the packet");
        let r = px.report();
        assert_eq!(r.drops.oversize_inbound, 1);
        assert_eq!(r.inbound_oversize.frag_needed_sent, 1);
    }
}

#[test]
fn an_ipv4_packet_without_df_above_the_imtu_is_fragmented_to_it() {
    let mut px = pipeline();
    let payload = pattern(BIG_PAYLOAD);
    let frame = udp4(false, &payload);
    let (inside, outside) = inbound(&mut px, &frame, 1_000);
    assert!(outside.is_empty(), "no error");
    assert_eq!(inside.len(), 2, "two fragments");
    let mut data = Vec::new();
    let mut pieces: Vec<(usize, Vec<u8>)> = inside
        .iter()
        .map(|f| {
            assert!(
                ip_len(f) <= usize::from(IMTU),
                "fits the iMTU: {}",
                ip_len(f)
            );
            let h = Ipv4Header::from_slice(&f[14..]).unwrap().0;
            assert_eq!(h.header_checksum, h.calc_header_checksum());
            assert_eq!(h.identification, 0x4242);
            let off = usize::from(h.fragment_offset.value()) * 8;
            (off, f[34..].to_vec())
        })
        .collect();
    pieces.sort();
    for (off, body) in pieces {
        assert_eq!(off, data.len(), "no gap, no overlap");
        data.extend_from_slice(&body);
    }
    assert_eq!(data, frame[34..], "the UDP datagram, whole");
    let r = px.report();
    assert_eq!(r.drops.oversize_inbound, 0);
    assert_eq!(
        (
            r.inbound_oversize.fragmented,
            r.inbound_oversize.fragments_out
        ),
        (1, 2)
    );
}

#[test]
fn an_ipv6_packet_above_the_imtu_gets_a_packet_too_big() {
    let mut px = pipeline();
    let frame = udp6(&pattern(9500));
    let (inside, outside) = inbound(&mut px, &frame, 1_000);
    assert!(inside.is_empty(), "dropped");
    assert_eq!(outside.len(), 1);
    let p = SlicedPacket::from_ethernet(&outside[0]).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("not IPv6")
    };
    assert_eq!(ip.header().destination(), OUTSIDE6);
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("not ICMPv6")
    };
    assert_eq!(
        icmp.icmp_type(),
        Icmpv6Type::PacketTooBig {
            mtu: u32::from(IMTU)
        }
    );
    let r = px.report();
    assert_eq!(
        (r.drops.oversize_inbound, r.inbound_oversize.ptb_sent),
        (1, 1)
    );
}

#[test]
fn errors_are_rate_limited_and_packets_at_the_imtu_pass() {
    let mut px = pipeline();
    let big = udp4(true, &pattern(BIG_PAYLOAD));
    let mut errors = 0;
    for i in 0..20 {
        errors += inbound(&mut px, &big, 1_000 + i).1.len();
    }
    // Linux's per-destination burst (6) at most.
    assert!((1..=6).contains(&errors), "{errors} errors");
    let r = px.report();
    assert_eq!(
        r.drops.oversize_inbound, 20,
        "every one dropped and counted"
    );
    assert_eq!(
        r.inbound_oversize.frag_needed_sent + r.inbound_oversize.icmp_rate_limited,
        20
    );
    // Exactly the iMTU: forwarded.
    let at = udp4(true, &pattern(usize::from(IMTU) - 28));
    let (inside, outside) = inbound(&mut px, &at, 2_000);
    assert_eq!(inside, vec![at], "as it came");
    assert!(outside.is_empty());
}
