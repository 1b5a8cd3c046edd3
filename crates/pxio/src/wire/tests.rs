//! Classifier tests: agreement with etherparse on valid packets, one test per malformation,
//! the pass-through classes, split headers, and no panics on arbitrary input.

use super::*;
use crate::checksum::{pseudo_header_v4, pseudo_header_v6};
use etherparse::{
    IpHeaders, Ipv4Header, LinkExtHeader, NetHeaders, PacketBuilder, PacketHeaders,
    TcpOptionElement, TransportHeader,
};
use proptest::prelude::*;

const MAC_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const MAC_DST: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
const V4_SRC: [u8; 4] = [192, 0, 2, 1];
const V4_DST: [u8; 4] = [198, 51, 100, 7];
const V6_SRC: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const V6_DST: [u8; 16] = [
    0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe, 0xef,
];

/// Offsets of the untagged test frames used by the malformation tests.
const L2: usize = 14;
const V4_TOTAL_LEN: usize = L2 + 2;
const V4_FLG_OFF: usize = L2 + 6;
const V4_PROTO: usize = L2 + 9;
const V6_PAYLOAD_LEN: usize = L2 + 4;
const V6_NEXT_HEADER: usize = L2 + 6;

fn mss_options() -> [TcpOptionElement; 4] {
    use TcpOptionElement::*;
    [
        MaximumSegmentSize(1460),
        Noop,
        WindowScale(7),
        SelectiveAcknowledgementPermitted,
    ]
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// IPv4 + TCP with TCP options, untagged.
fn v4_tcp(payload_len: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .ipv4(V4_SRC, V4_DST, 64)
        .tcp(40000, 443, 0x1000, 64240)
        .ack(77)
        .options(&mss_options())
        .unwrap();
    let mut out = Vec::new();
    b.write(&mut out, &payload(payload_len)).unwrap();
    out
}

/// IPv4 with IP options + TCP, single VLAN tag.
fn v4_opts_tcp_vlan(payload_len: usize) -> Vec<u8> {
    let mut ip = Ipv4Header::new(0, 64, etherparse::IpNumber::TCP, V4_SRC, V4_DST).unwrap();
    ip.options = [0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00].into();
    let b = PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .single_vlan(100.try_into().unwrap())
        .ip(IpHeaders::Ipv4(ip, Default::default()))
        .tcp(1234, 80, 7, 1000)
        .options(&mss_options())
        .unwrap();
    let mut out = Vec::new();
    b.write(&mut out, &payload(payload_len)).unwrap();
    out
}

/// IPv4 + UDP, untagged.
fn v4_udp(payload_len: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .ipv4(V4_SRC, V4_DST, 64)
        .udp(5353, 53);
    let mut out = Vec::new();
    b.write(&mut out, &payload(payload_len)).unwrap();
    out
}

/// IPv6 + UDP, untagged.
fn v6_udp(payload_len: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .ipv6(V6_SRC, V6_DST, 64)
        .udp(4789, 50000);
    let mut out = Vec::new();
    b.write(&mut out, &payload(payload_len)).unwrap();
    out
}

/// IPv6 + TCP, double VLAN tag.
fn v6_tcp_qinq(payload_len: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .double_vlan(10.try_into().unwrap(), 20.try_into().unwrap())
        .ipv6(V6_SRC, V6_DST, 64)
        .tcp(443, 40001, 1, 100)
        .syn()
        .options(&mss_options())
        .unwrap();
    let mut out = Vec::new();
    b.write(&mut out, &payload(payload_len)).unwrap();
    out
}

/// A reply (addresses and ports swapped) classifies to the reversed key, IPv4 and IPv6, and
/// reversing twice gives the key back.
#[test]
fn a_reply_has_the_reversed_key() {
    let pair = |v6: bool, udp: bool| {
        let (b, back) = if v6 {
            (
                PacketBuilder::ethernet2(MAC_SRC, MAC_DST).ipv6(V6_SRC, V6_DST, 64),
                PacketBuilder::ethernet2(MAC_DST, MAC_SRC).ipv6(V6_DST, V6_SRC, 64),
            )
        } else {
            (
                PacketBuilder::ethernet2(MAC_SRC, MAC_DST).ipv4(V4_SRC, V4_DST, 64),
                PacketBuilder::ethernet2(MAC_DST, MAC_SRC).ipv4(V4_DST, V4_SRC, 64),
            )
        };
        let (mut out, mut reply) = (Vec::new(), Vec::new());
        if udp {
            b.udp(5353, 53).write(&mut out, &payload(20)).unwrap();
            back.udp(53, 5353).write(&mut reply, &payload(20)).unwrap();
        } else {
            b.tcp(40000, 443, 1, 100)
                .write(&mut out, &payload(20))
                .unwrap();
            back.tcp(443, 40000, 1, 100)
                .write(&mut reply, &payload(20))
                .unwrap();
        }
        let key = |f: &[u8]| headers_of(classify(f, f.len())).key;
        (key(&out), key(&reply))
    };
    for v6 in [false, true] {
        for udp in [false, true] {
            let (out, reply) = pair(v6, udp);
            assert_ne!(out, reply);
            assert_eq!(out.reversed(), reply, "v6 {v6} udp {udp}");
            assert_eq!(out.reversed().reversed(), out);
        }
    }
}

/// The classification etherparse's decoding implies, for frames it parses fully.
fn expected_from_etherparse(frame: &[u8]) -> Class {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses");
    let l2_len = h.link.as_ref().unwrap().header_len()
        + h.link_exts
            .iter()
            .map(LinkExtHeader::header_len)
            .sum::<usize>();
    let (l3_len, ip_len, src, dst, v6) = match h.net.as_ref().unwrap() {
        NetHeaders::Ipv4(ip, _) => {
            let mut src = [0; 16];
            let mut dst = [0; 16];
            src[..4].copy_from_slice(&ip.source);
            dst[..4].copy_from_slice(&ip.destination);
            (ip.header_len(), usize::from(ip.total_len), src, dst, false)
        }
        NetHeaders::Ipv6(ip, _) => (
            40,
            40 + usize::from(ip.payload_length),
            ip.source,
            ip.destination,
            true,
        ),
        other => panic!("unexpected network layer {other:?}"),
    };
    let (l4_len, sport, dport, proto) = match h.transport.as_ref().unwrap() {
        TransportHeader::Tcp(t) => (t.header_len(), t.source_port, t.destination_port, 6),
        TransportHeader::Udp(u) => (8, u.source_port, u.destination_port, 17),
        other => panic!("unexpected transport {other:?}"),
    };
    let headers = Headers {
        l2_len: l2_len as u16,
        l3_len: l3_len as u16,
        l4_len: l4_len as u16,
        v6,
        proto,
        ip_len: ip_len as u16,
        payload_len: (ip_len - l3_len - l4_len) as u16,
        key: FlowKey {
            src,
            dst,
            sport,
            dport,
            proto,
            v6,
        },
    };
    assert_eq!(headers.payload_len as usize, h.payload.slice().len());
    if proto == 6 {
        Class::Tcp(headers)
    } else {
        Class::Udp(headers)
    }
}

fn headers_of(class: Class) -> Headers {
    match class {
        Class::Tcp(h) | Class::Udp(h) => h,
        other => panic!("expected TCP or UDP, got {other:?}"),
    }
}

fn malformed(frame: &[u8]) -> Class {
    classify(frame, frame.len())
}

#[test]
fn v4_tcp_with_options_matches_etherparse() {
    let frame = v4_tcp(100);
    let class = classify(&frame, frame.len());
    assert_eq!(class, expected_from_etherparse(&frame));
    let h = headers_of(class);
    assert_eq!(
        (h.l2_len, h.l3_len, h.l4_len, h.payload_len),
        (14, 20, 32, 100)
    );
    assert_eq!(h.hdr_len(), 66);
    assert_eq!(h.frame_len(), frame.len());
    assert_eq!(h.key.src_v4(), Some(V4_SRC));
    assert_eq!(h.key.dst_v4(), Some(V4_DST));
    assert_eq!(
        (h.key.sport, h.key.dport, h.key.proto, h.key.v6),
        (40000, 443, 6, false)
    );

    // The located headers read back through the views, checksums included.
    let ip = Ipv4Packet::new_checked(&frame[h.l3_offset()..h.frame_len()]).unwrap();
    assert!(ip.verify_checksum());
    let tcp = TcpPacket::new_checked(&frame[h.l4_offset()..h.frame_len()]).unwrap();
    assert_eq!(tcp.mss(), Some(1460));
    let l4_len = h.ip_len - h.l3_len;
    assert!(tcp.verify_checksum(pseudo_header_v4(V4_SRC, V4_DST, 6, l4_len)));
}

#[test]
fn v4_options_and_vlan_match_etherparse() {
    let frame = v4_opts_tcp_vlan(33);
    let h = headers_of(classify(&frame, frame.len()));
    assert_eq!(Class::Tcp(h), expected_from_etherparse(&frame));
    assert_eq!((h.l2_len, h.l3_len), (18, 28));
    let eth = EthernetFrame::new_checked(&frame[..]).unwrap();
    assert_eq!(eth.vlan_id(0), Some(100));
}

#[test]
fn v6_udp_matches_etherparse() {
    let frame = v6_udp(61);
    let h = headers_of(classify(&frame, frame.len()));
    assert_eq!(Class::Udp(h), expected_from_etherparse(&frame));
    assert_eq!(
        (h.l2_len, h.l3_len, h.l4_len, h.ip_len, h.payload_len),
        (14, 40, 8, 109, 61)
    );
    assert!(h.key.v6 && h.v6);
    assert_eq!(h.key.src_v4(), None);
    let udp = UdpPacket::new_checked(&frame[h.l4_offset()..]).unwrap();
    assert!(udp.verify_checksum(pseudo_header_v6(V6_SRC, V6_DST, 17, 69)));
}

#[test]
fn v6_tcp_double_vlan_matches_etherparse() {
    let frame = v6_tcp_qinq(0);
    let h = headers_of(classify(&frame, frame.len()));
    assert_eq!(Class::Tcp(h), expected_from_etherparse(&frame));
    assert_eq!((h.l2_len, h.payload_len), (22, 0));
}

#[test]
fn v4_udp_matches_etherparse() {
    let frame = v4_udp(0);
    assert_eq!(
        classify(&frame, frame.len()),
        expected_from_etherparse(&frame)
    );
}

#[test]
fn ethernet_padding_is_allowed() {
    let mut frame = v4_udp(2);
    let unpadded = frame.len();
    frame.resize(60, 0);
    let h = headers_of(classify(&frame, frame.len()));
    assert_eq!(h.frame_len(), unpadded);
    assert_eq!(h.payload_len, 2);
}

#[test]
fn head_past_frame_len_is_ignored() {
    let frame = v4_udp(10);
    // A head longer than the frame (stale bytes in the buffer) cannot lengthen it.
    assert_eq!(
        classify(&frame, frame.len() - 1),
        Class::Malformed(Malformed::BadTotalLength)
    );
}

#[test]
fn flow_key_hashes_like_the_nic() {
    let t = Toeplitz::default();
    let h = headers_of(classify(&v4_tcp(0), v4_tcp(0).len()));
    assert_eq!(h.key.rss_hash(&t), t.hash_v4(V4_SRC, V4_DST, 40000, 443));
    let h = headers_of(classify(&v6_udp(0), v6_udp(0).len()));
    assert_eq!(h.key.rss_hash(&t), t.hash_v6(V6_SRC, V6_DST, 4789, 50000));
}

// ---- pass-through classes ----

#[test]
fn ipv4_fragments() {
    let mut frame = v4_udp(40);
    frame[V4_FLG_OFF] |= 0x20; // MF, offset 0: the first fragment
    assert_eq!(malformed(&frame), Class::Fragment);
    frame[V4_FLG_OFF] = 0x00;
    frame[V4_FLG_OFF + 1] = 0x10; // last fragment, offset 128
    assert_eq!(malformed(&frame), Class::Fragment);
    frame[V4_FLG_OFF] = 0x40; // DF only: not a fragment
    frame[V4_FLG_OFF + 1] = 0x00;
    assert!(matches!(malformed(&frame), Class::Udp(_)));
}

/// Inserts an 8-byte extension header after the IPv6 fixed header of an untagged frame.
fn with_v6_ext(mut frame: Vec<u8>, kind: u8, ext: [u8; 8]) -> Vec<u8> {
    let next = frame[V6_NEXT_HEADER];
    let mut ext = ext;
    ext[0] = next;
    frame[V6_NEXT_HEADER] = kind;
    let len = u16::from_be_bytes([frame[V6_PAYLOAD_LEN], frame[V6_PAYLOAD_LEN + 1]]) + 8;
    frame[V6_PAYLOAD_LEN..V6_PAYLOAD_LEN + 2].copy_from_slice(&len.to_be_bytes());
    frame.splice(L2 + 40..L2 + 40, ext);
    frame
}

#[test]
fn ipv6_fragment_header() {
    let frame = with_v6_ext(
        v6_udp(16),
        ip_proto::IPV6_FRAG,
        [0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef],
    );
    assert!(PacketHeaders::from_ethernet_slice(&frame).is_ok());
    assert_eq!(malformed(&frame), Class::Fragment);
}

#[test]
fn ipv6_extension_headers_pass_through() {
    // Hop-by-hop with a PadN option.
    let frame = with_v6_ext(v6_udp(16), ip_proto::HOP_BY_HOP, [0, 0, 1, 4, 0, 0, 0, 0]);
    assert!(PacketHeaders::from_ethernet_slice(&frame).is_ok());
    assert_eq!(malformed(&frame), Class::OtherIp);
    let frame = with_v6_ext(v6_udp(16), ip_proto::IPV6_OPTS, [0, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(malformed(&frame), Class::OtherIp);
}

// ---- the flow of packets classify does not merge ----

/// The key `classify` gives the same packet without its extension header or fragment bits.
fn plain_key(frame: &[u8]) -> FlowKey {
    match classify(frame, frame.len()) {
        Class::Tcp(h) | Class::Udp(h) => h.key,
        other => panic!("not a plain TCP/UDP packet: {other:?}"),
    }
}

#[test]
fn flow_of_reads_through_ipv6_extension_headers() {
    let plain = v6_tcp_qinq(100);
    let key = plain_key(&plain);
    // Untag it so `with_v6_ext`'s offsets apply, then stack hop-by-hop + destination options.
    let mut untagged = plain.clone();
    untagged.drain(12..20);
    let one = with_v6_ext(untagged, ip_proto::IPV6_OPTS, [0, 0, 1, 4, 0, 0, 0, 0]);
    let two = with_v6_ext(one, ip_proto::HOP_BY_HOP, [0, 0, 1, 4, 0, 0, 0, 0]);
    assert_eq!(malformed(&two), Class::OtherIp);
    assert_eq!(flow_of(&two, two.len()), Some(key));
    // A first fragment names its flow; a later one cannot.
    let first = with_v6_ext(v6_udp(16), ip_proto::IPV6_FRAG, [0, 0, 0, 1, 0, 0, 0, 7]);
    assert_eq!(flow_of(&first, first.len()), Some(plain_key(&v6_udp(16))));
    let later = with_v6_ext(v6_udp(16), ip_proto::IPV6_FRAG, [0, 0, 0, 0x11, 0, 0, 0, 7]);
    assert_eq!(flow_of(&later, later.len()), None);
    // The chain cut short: no ports to read.
    assert_eq!(flow_of(&two, L2 + 40 + 12), None);
}

#[test]
fn flow_of_ipv4_fragments_and_bad_tcp_headers() {
    let mut frame = v4_udp(40);
    let key = plain_key(&frame);
    frame[V4_FLG_OFF] |= 0x20; // MF, offset 0: the first fragment carries the ports
    assert_eq!(flow_of(&frame, frame.len()), Some(key));
    frame[V4_FLG_OFF + 1] = 0x10; // offset 128: no ports
    assert_eq!(flow_of(&frame, frame.len()), None);
    let mut tcp = v4_tcp(0);
    let key = plain_key(&tcp);
    tcp[L2 + 20 + 12] = 4 << 4; // data offset below 5: malformed, ports still there
    assert_eq!(flow_of(&tcp, tcp.len()), Some(key));
    // Neither TCP nor UDP, or not IP at all.
    tcp[V4_PROTO] = ip_proto::ICMP;
    assert_eq!(flow_of(&tcp, tcp.len()), None);
    assert_eq!(flow_of(&tcp[..L2 + 10], L2 + 10), None);
}

#[test]
fn icmp_is_other_ip() {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .ipv4(V4_SRC, V4_DST, 64)
        .icmpv4_echo_request(1, 2)
        .write(&mut frame, b"ping")
        .unwrap();
    assert_eq!(malformed(&frame), Class::OtherIp);

    let mut frame = Vec::new();
    PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .ipv6(V6_SRC, V6_DST, 64)
        .icmpv6_echo_request(1, 2)
        .write(&mut frame, b"ping")
        .unwrap();
    assert_eq!(malformed(&frame), Class::OtherIp);

    // Any other protocol (SCTP here) passes through too, however short its header.
    let mut frame = v4_udp(0);
    frame[V4_PROTO] = 132;
    assert_eq!(malformed(&frame), Class::OtherIp);
}

#[test]
fn arp_and_lldp_are_non_ip() {
    let mut arp = [MAC_DST, MAC_SRC].concat();
    arp.extend_from_slice(&ethernet::ethertype::ARP.to_be_bytes());
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0; 20]);
    assert_eq!(malformed(&arp), Class::NonIp);
    let mut lldp = [MAC_DST, MAC_SRC].concat();
    lldp.extend_from_slice(&ethernet::ethertype::LLDP.to_be_bytes());
    assert_eq!(malformed(&lldp), Class::NonIp);
    // A VLAN-tagged ARP is still ARP.
    let mut tagged = [MAC_DST, MAC_SRC].concat();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x06]);
    assert_eq!(malformed(&tagged), Class::NonIp);
}

#[test]
fn ipv6_longer_than_ip_len_can_express_is_other_ip() {
    // 40 + 65535 bytes overflows `Headers::ip_len`; such a packet is valid, so pass it through.
    let mut frame = v6_udp(0);
    frame[V6_PAYLOAD_LEN..V6_PAYLOAD_LEN + 2].copy_from_slice(&u16::MAX.to_be_bytes());
    let frame_len = L2 + 40 + usize::from(u16::MAX);
    assert_eq!(classify(&frame, frame_len), Class::OtherIp);
    // The largest that fits is still UDP.
    let payload_len = u16::MAX - 40;
    frame[V6_PAYLOAD_LEN..V6_PAYLOAD_LEN + 2].copy_from_slice(&payload_len.to_be_bytes());
    frame[L2 + 44..L2 + 46].copy_from_slice(&payload_len.to_be_bytes());
    let h = headers_of(classify(&frame, frame_len));
    assert_eq!((h.ip_len, h.payload_len), (u16::MAX, payload_len - 8));
}

// ---- one test per malformation ----

#[test]
fn truncated_l2() {
    let frame = v4_tcp(0);
    assert_eq!(
        malformed(&frame[..13]),
        Class::Malformed(Malformed::TruncatedL2)
    );
    assert_eq!(malformed(&[]), Class::Malformed(Malformed::TruncatedL2));
    let tagged = v4_opts_tcp_vlan(0);
    assert_eq!(
        malformed(&tagged[..17]),
        Class::Malformed(Malformed::TruncatedL2)
    );
    let qinq = v6_tcp_qinq(0);
    assert_eq!(
        malformed(&qinq[..21]),
        Class::Malformed(Malformed::TruncatedL2)
    );
}

#[test]
fn truncated_l3() {
    let frame = v4_tcp(0);
    assert_eq!(
        malformed(&frame[..L2 + 19]),
        Class::Malformed(Malformed::TruncatedL3)
    );
    let opts = v4_opts_tcp_vlan(0);
    // The fixed header is there, the options are cut.
    assert_eq!(
        malformed(&opts[..18 + 24]),
        Class::Malformed(Malformed::TruncatedL3)
    );
    let v6 = v6_udp(0);
    assert_eq!(
        malformed(&v6[..L2 + 39]),
        Class::Malformed(Malformed::TruncatedL3)
    );
}

#[test]
fn bad_version() {
    let mut frame = v4_tcp(0);
    frame[L2] = 0x65;
    assert_eq!(malformed(&frame), Class::Malformed(Malformed::BadVersion));
    let mut frame = v6_udp(0);
    frame[L2] = 0x40;
    assert_eq!(malformed(&frame), Class::Malformed(Malformed::BadVersion));
}

#[test]
fn bad_header_length() {
    let mut frame = v4_tcp(0);
    frame[L2] = 0x44;
    assert_eq!(
        malformed(&frame),
        Class::Malformed(Malformed::BadHeaderLength)
    );
}

#[test]
fn bad_total_length() {
    let mut frame = v4_tcp(0);
    frame[V4_TOTAL_LEN..V4_TOTAL_LEN + 2].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(
        malformed(&frame),
        Class::Malformed(Malformed::BadTotalLength)
    );
    let frame = v4_tcp(10);
    // The IP header claims more than the frame holds.
    assert_eq!(
        malformed(&frame[..frame.len() - 1]),
        Class::Malformed(Malformed::BadTotalLength)
    );
    let frame = v6_udp(10);
    assert_eq!(
        malformed(&frame[..frame.len() - 1]),
        Class::Malformed(Malformed::BadTotalLength)
    );
}

#[test]
fn truncated_l4() {
    // TCP: an IP packet with room for only 19 bytes of TCP header.
    let mut frame = v4_tcp(0);
    frame[V4_TOTAL_LEN..V4_TOTAL_LEN + 2].copy_from_slice(&39u16.to_be_bytes());
    assert_eq!(malformed(&frame), Class::Malformed(Malformed::TruncatedL4));
    // UDP over IPv6 with a 4-byte payload.
    let mut frame = v6_udp(0);
    frame[V6_PAYLOAD_LEN..V6_PAYLOAD_LEN + 2].copy_from_slice(&4u16.to_be_bytes());
    assert_eq!(malformed(&frame), Class::Malformed(Malformed::TruncatedL4));
}

#[test]
fn bad_tcp_data_offset() {
    let mut frame = v4_tcp(0);
    let doff = L2 + 20 + 12;
    frame[doff] = 4 << 4;
    assert_eq!(
        malformed(&frame),
        Class::Malformed(Malformed::BadTcpDataOffset)
    );
    // Data offset 15 (60 bytes) in a 32-byte TCP header with no payload.
    frame[doff] = 15 << 4;
    assert_eq!(
        malformed(&frame),
        Class::Malformed(Malformed::BadTcpDataOffset)
    );
    // ...which is fine again once the IP packet is long enough.
    let mut frame = v4_tcp(28);
    frame[doff] = 15 << 4;
    let h = headers_of(malformed(&frame));
    assert_eq!((h.l4_len, h.payload_len), (60, 0));
}

#[test]
fn bad_udp_length() {
    let mut frame = v4_udp(10);
    let len_at = L2 + 20 + 4;
    frame[len_at..len_at + 2].copy_from_slice(&17u16.to_be_bytes());
    assert_eq!(malformed(&frame), Class::Malformed(Malformed::BadUdpLength));
    frame[len_at..len_at + 2].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(malformed(&frame), Class::Malformed(Malformed::BadUdpLength));
    frame[len_at..len_at + 2].copy_from_slice(&18u16.to_be_bytes());
    assert!(matches!(malformed(&frame), Class::Udp(_)));
}

#[test]
fn headers_not_contiguous() {
    for frame in [
        v4_tcp(100),
        v4_opts_tcp_vlan(100),
        v6_udp(100),
        v6_tcp_qinq(100),
    ] {
        let h = headers_of(classify(&frame, frame.len()));
        for cut in 0..h.hdr_len() {
            assert_eq!(
                classify(&frame[..cut], frame.len()),
                Class::Malformed(Malformed::HeadersNotContiguous),
                "cut at {cut}"
            );
        }
        for cut in h.hdr_len()..=frame.len() {
            assert_eq!(
                classify(&frame[..cut], frame.len()),
                class_of(h),
                "cut at {cut}"
            );
        }
    }
}

fn class_of(h: Headers) -> Class {
    if h.proto == ip_proto::UDP {
        Class::Udp(h)
    } else {
        Class::Tcp(h)
    }
}

#[test]
fn split_non_ip_frames_need_only_l2() {
    let mut arp = [MAC_DST, MAC_SRC].concat();
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    assert_eq!(classify(&arp[..14], arp.len()), Class::NonIp);
    assert_eq!(
        classify(&arp[..13], arp.len()),
        Class::Malformed(Malformed::HeadersNotContiguous)
    );
}

// ---- properties ----

/// Valid frames of every shape the tests build, with random payload lengths.
fn valid_frame() -> impl Strategy<Value = Vec<u8>> {
    (0usize..5, 0usize..300).prop_map(|(shape, len)| match shape {
        0 => v4_tcp(len),
        1 => v4_opts_tcp_vlan(len),
        2 => v4_udp(len),
        3 => v6_udp(len),
        _ => v6_tcp_qinq(len),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..160),
                                       frame_len in 0usize..400) {
        let _ = flow_of(&bytes, frame_len);
        let _ = classify(&bytes, frame_len);
        let _ = classify(&bytes, bytes.len());
        let _ = classify(&bytes, usize::MAX);
    }

    #[test]
    fn never_panics_on_mutated_frames(frame in valid_frame(),
                                      flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
                                      cut in any::<prop::sample::Index>(),
                                      extra in 0usize..100) {
        let mut frame = frame;
        for (at, value) in flips {
            let i = at.index(frame.len());
            frame[i] = value;
        }
        let head = &frame[..cut.index(frame.len() + 1)];
        let class = classify(head, frame.len() + extra);
        // Whatever was found must lie inside the head and the frame.
        if let Class::Tcp(h) | Class::Udp(h) = class {
            prop_assert!(h.hdr_len() <= head.len());
            prop_assert!(h.frame_len() <= frame.len() + extra);
            prop_assert_eq!(usize::from(h.payload_len) + h.hdr_len(), h.frame_len());
        }
    }

    #[test]
    fn valid_frames_agree_with_etherparse(frame in valid_frame(), padding in 0usize..64) {
        let expected = expected_from_etherparse(&frame);
        let mut padded = frame.clone();
        padded.resize(frame.len() + padding, 0);
        prop_assert_eq!(classify(&padded, padded.len()), expected);
    }
}

/// Plain IPv4/TCP frames (the fast path's shape) with the fields it checks pushed to and past
/// their limits: total length, fragment bits, protocol, version/IHL, data offset, EtherType.
fn plain_v4_tcp_near_limits() -> impl Strategy<Value = (Vec<u8>, usize, usize)> {
    let field = prop::sample::select(vec![
        V4_TOTAL_LEN,
        V4_TOTAL_LEN + 1,
        V4_FLG_OFF,
        V4_FLG_OFF + 1,
        V4_PROTO,
        L2,
        L2 + 20 + 12,
        12,
        13,
    ]);
    (
        0usize..80,
        proptest::collection::vec((field, any::<u8>()), 0..3),
        0usize..120,
        0usize..8,
    )
        .prop_map(|(len, flips, cut, extra)| {
            let mut frame = v4_tcp(len);
            for (at, value) in flips {
                frame[at] = value;
            }
            let head_len = frame.len().saturating_sub(cut);
            let frame_len = frame.len() + extra - extra.min(4);
            (frame, head_len, frame_len)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_fast_path_agrees_with_the_general_one(
        (frame, head_len, frame_len) in plain_v4_tcp_near_limits()
    ) {
        let head = &frame[..head_len.min(frame_len)];
        prop_assert_eq!(classify(head, frame_len), classify_general(head, frame_len));
        if let Some(h) = plain_ipv4_tcp(head, frame_len) {
            prop_assert_eq!(Class::Tcp(h), classify_general(head, frame_len));
        }
        // Parsing in place over an earlier, different parse gives what a fresh parse gives.
        let mut reused = Parsed::of(&v6_udp(10), 62);
        reused.parse_into(&frame[..head_len], frame_len);
        prop_assert_eq!(reused, Parsed::of(&frame[..head_len], frame_len));
    }
}

/// What `plain_ack` must agree with: the classifier's answer for a bare acknowledgement in a
/// frame without VLAN tags, IPv4 options or IPv6 extension headers, read from the TCP header's
/// own flags.
fn bare_ack_by_classify(head: &[u8], frame_len: usize) -> Option<(FlowKey, u32, u8)> {
    let h = match classify(head, frame_len) {
        Class::Tcp(h)
            if h.l2_len == 14 && h.l3_len == if h.v6 { 40 } else { 20 } && h.payload_len == 0 =>
        {
            h
        }
        _ => return None,
    };
    let tcp = TcpPacket::new_checked(&head[h.l4_offset()..h.hdr_len()]).ok()?;
    let flags = tcp.flags();
    let bare = flags & tcp_flags::ACK != 0
        && flags & (tcp_flags::SYN | tcp_flags::RST | tcp_flags::FIN) == 0;
    let dscp = if h.v6 {
        Ipv6Packet::new_unchecked(&head[L2..]).dscp()
    } else {
        head[L2 + 1] >> 2
    };
    bare.then(|| (h.key, tcp.ack_number(), dscp))
}

#[test]
fn a_bare_ack_is_read_as_the_classifier_reads_it() {
    let ack = v4_tcp(0);
    let a = plain_ack(&ack, ack.len()).expect("a bare ACK");
    assert_eq!(
        Some((a.key, a.ack, a.dscp)),
        bare_ack_by_classify(&ack, ack.len())
    );
    assert_eq!(a.ack, 77);
    // Padded to Ethernet's minimum, still a bare ACK.
    let mut padded = ack.clone();
    padded.resize(ack.len() + 10, 0);
    assert_eq!(plain_ack(&padded, padded.len()), Some(a));
    // With payload, with SYN, RST or FIN, tagged, with IPv4 options, fragmented, or with its TCP
    // header cut off in the first segment: not one.
    assert_eq!(plain_ack(&v4_tcp(1), v4_tcp(1).len()), None);
    for flag in [tcp_flags::SYN, tcp_flags::RST, tcp_flags::FIN] {
        let mut f = ack.clone();
        f[L2 + 20 + 13] |= flag;
        assert_eq!(plain_ack(&f, f.len()), None, "flag {flag:#x}");
    }
    assert_eq!(
        plain_ack(&v4_opts_tcp_vlan(0), v4_opts_tcp_vlan(0).len()),
        None
    );
    let mut frag = ack.clone();
    frag[V4_FLG_OFF] |= 0x20;
    assert_eq!(plain_ack(&frag, frag.len()), None);
    assert_eq!(plain_ack(&ack[..ack.len() - 1], ack.len()), None);
    // IPv6 without extension headers: one; tagged: not.
    let v6 = v6_ack(0, tcp_flags::ACK);
    let a6 = plain_ack(&v6, v6.len()).expect("a bare IPv6 ACK");
    assert!(a6.key.v6);
    assert_eq!(
        Some((a6.key, a6.ack, a6.dscp)),
        bare_ack_by_classify(&v6, v6.len())
    );
    assert_eq!(plain_ack(&v6_tcp_qinq(0), v6_tcp_qinq(0).len()), None);
}

/// An untagged IPv6 TCP frame with `options` 4-byte words of TCP options (NOPs) and `flags`.
fn v6_ack(options: usize, flags: u8) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_SRC, MAC_DST)
        .ipv6(V6_SRC, V6_DST, 64)
        .tcp(40000, 443, 0x1000, 64240)
        .ack(0xdead_beef)
        .options_raw(&vec![1; options * 4])
        .unwrap();
    let mut f = Vec::new();
    b.write(&mut f, &[]).unwrap();
    f[L2 + 40 + 13] = flags;
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    /// Any bytes in the first 90 of a bare ACK's frame (IPv4 or IPv6), any padding or
    /// truncation, any split of the head: `plain_ack` answers exactly where the classifier sees
    /// a bare ACK in an untagged frame without IPv4 options or IPv6 extension headers, and
    /// reads the same key, acknowledgement and DSCP.
    #[test]
    fn plain_ack_agrees_with_the_classifier(
        v6 in any::<bool>(),
        options in 0usize..4,
        payload_len in prop_oneof![Just(0usize), 1usize..4],
        flags in prop_oneof![
            Just(tcp_flags::ACK),
            Just(tcp_flags::ACK | tcp_flags::PSH),
            any::<u8>(),
        ],
        edits in prop::collection::vec((0usize..90, any::<u8>()), 0..4),
        extra in 0usize..12,
        cut in 0usize..8,
        head_cut in prop_oneof![Just(0usize), 1usize..60],
    ) {
        let eth = PacketBuilder::ethernet2(MAC_SRC, MAC_DST);
        let ip = if v6 { eth.ipv6(V6_SRC, V6_DST, 64) } else { eth.ipv4(V4_SRC, V4_DST, 64) };
        let b = ip
            .tcp(40000, 443, 0x1000, 64240)
            .ack(0xdead_beef)
            .options_raw(&vec![1; options * 4])
            .unwrap();
        let mut f = Vec::new();
        b.write(&mut f, &payload(payload_len)).unwrap();
        let l4 = L2 + if v6 { 40 } else { 20 };
        f[l4 + 13] = flags;
        for (at, v) in edits {
            if at < f.len() {
                f[at] = v;
            }
        }
        f.resize(f.len() + extra, 0);
        let frame_len = f.len().saturating_sub(cut);
        let head = &f[..f.len().saturating_sub(head_cut)];
        let got = plain_ack(head, frame_len).map(|a| (a.key, a.ack, a.dscp));
        prop_assert_eq!(got, bare_ack_by_classify(head, frame_len));
    }
}
