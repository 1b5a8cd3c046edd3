//! What the gateway takes for a caravan on the way out (`docs/caravan.md`, "Telling a caravan from
//! ordinary UDP"): only a marked datagram that carries the caravan header. An inside datagram that
//! merely wears the DSCP mark, or whose payload merely looks like a caravan body, passes untouched
//! and counted, never dropped or rewritten.

mod common;

use pxgw::pipeline::Pipeline;
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};

fn pipeline() -> Pipeline<HeapBuf> {
    common::pipeline_with("", "")
}

/// A datagram from inside (port 7000 → 5000) with DSCP `dscp` and `payload`.
fn inside_udp(v6: bool, dscp: u8, payload: &[u8]) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 1],
        src: [2, 0, 0, 0, 0, 2],
        vlan_tci: None,
        ethertype: if v6 {
            wire::ethernet::ethertype::IPV6
        } else {
            wire::ethernet::ethertype::IPV4
        },
    };
    let ip = if v6 {
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        dst[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        (src[15], dst[15]) = (2, 1);
        wire::IpRepr::V6(wire::Ipv6Repr {
            dscp,
            ..wire::Ipv6Repr::new(src, dst)
        })
    } else {
        wire::IpRepr::V4(wire::Ipv4Repr {
            dscp,
            ..wire::Ipv4Repr::new([198, 51, 100, 2], [198, 18, 0, 1])
        })
    };
    let udp = wire::UdpRepr {
        src_port: 7000,
        dst_port: 5000,
    };
    wire::udp_frame(ethernet, ip, udp, payload).unwrap()
}

/// An inner datagram as a caravan body holds it: a UDP header with the flow's ports.
fn inner(payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&7000u16.to_be_bytes());
    v.extend_from_slice(&5000u16.to_be_bytes());
    v.extend_from_slice(&((payload.len() + 8) as u16).to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

fn outbound(px: &mut Pipeline<HeapBuf>, frame: &[u8]) -> Vec<Vec<u8>> {
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    px.outbound(pool.packet(frame), 1, &mut out);
    out.iter().map(PacketBuf::to_vec).collect()
}

#[test]
fn an_ordinary_marked_datagram_from_inside_passes_untouched() {
    for v6 in [false, true] {
        let mut px = pipeline();
        for payload in [&b"an ordinary datagram that wears DSCP 7"[..], b"", b"abc"] {
            let f = inside_udp(v6, 7, payload);
            assert_eq!(outbound(&mut px, &f), vec![f.clone()], "v6 {v6}: untouched");
        }
        let r = px.report();
        assert_eq!(r.drops.caravan_malformed, 0, "v6 {v6}: nothing dropped");
        assert_eq!(r.caravan.caravans_unpacked, 0, "v6 {v6}");
        assert_eq!(
            r.caravan.marked_plain, 3,
            "v6 {v6}: counted as what they are"
        );
    }
}

#[test]
fn a_caravan_looking_payload_from_inside_is_not_rewritten() {
    for v6 in [false, true] {
        let mut px = pipeline();
        let body = [inner(b"hello"), inner(b"world")].concat();
        // The magic and the version, then a count whose check does not match: still no caravan
        // header.
        let mut almost = [&pxio::caravan::format::encode_header(2)[..], &body].concat();
        almost[5] = 3;
        for payload in [body, almost] {
            let f = inside_udp(v6, 7, &payload);
            assert_eq!(outbound(&mut px, &f), vec![f.clone()], "v6 {v6}: untouched");
        }
        let r = px.report();
        assert_eq!(r.caravan.caravans_unpacked, 0, "v6 {v6}");
        assert_eq!(r.drops.caravan_malformed, 0, "v6 {v6}");
        assert_eq!(r.caravan.marked_plain, 2, "v6 {v6}");
    }
}

/// A caravan the gateway packed itself, as it reaches the inside.
fn packed(px: &mut Pipeline<HeapBuf>, v6: bool, payloads: &[&[u8]]) -> Vec<u8> {
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    for p in payloads {
        // From outside: the inside frame's addresses and ports swapped.
        let mut f = inside_udp(v6, 0, p);
        let l3 = 14;
        let l4 = l3 + if v6 { 40 } else { 20 };
        let (a, b) = if v6 { (8, 24) } else { (12, 16) };
        let n = if v6 { 16 } else { 4 };
        let (src, dst) = (
            f[l3 + a..l3 + a + n].to_vec(),
            f[l3 + b..l3 + b + n].to_vec(),
        );
        f[l3 + a..l3 + a + n].copy_from_slice(&dst);
        f[l3 + b..l3 + b + n].copy_from_slice(&src);
        f.copy_within(l4..l4 + 2, l4 + 2);
        f[l4..l4 + 2].copy_from_slice(&5000u16.to_be_bytes());
        px.inbound(pool.packet(&f), 0, &mut out);
    }
    px.flush(1, &mut out);
    assert_eq!(out.len(), 1, "one caravan");
    let c = out[0].to_vec();
    assert!(pxio::caravan::is_caravan(&c, c.len(), 7));
    c
}

/// A caravan header of a version the gateway does not know is not its to rewrite or drop: it
/// passes untouched, counted (`docs/caravan.md`, "Versions"). The same caravan with the version
/// the gateway writes is unpacked.
#[test]
fn a_caravan_of_an_unknown_version_passes_untouched() {
    for v6 in [false, true] {
        let mut px = pipeline();
        let good = packed(&mut px, v6, &[b"one", b"two"]);
        let at = 14 + if v6 { 40 } else { 20 } + 8 + 4;
        assert_eq!(good[at], pxio::caravan::VERSION);
        let mut other = good.clone();
        other[at] = pxio::caravan::VERSION + 1;
        assert_eq!(outbound(&mut px, &other), vec![other.clone()], "v6 {v6}");
        assert_eq!(outbound(&mut px, &good).len(), 2, "v6 {v6}: unpacked");
        let r = px.report();
        assert_eq!(r.caravan.unknown_version, 1, "v6 {v6}");
        assert_eq!(r.caravan.caravans_unpacked, 1, "v6 {v6}");
        assert_eq!(r.drops.caravan_malformed, 0, "v6 {v6}");
    }
}
