//! Which inbound UDP the gateway packs into caravans (`docs/caravan.md`): the families of
//! `[caravan] families`, untagged or behind one 802.1Q tag, and only datagrams whose TTL or hop
//! limit exceeds `[caravan] pass_ttl`; the rest passes at once, unpacked, counted, and after
//! whatever its flow holds.

mod common;

use pxgw::config::{Config, ConfigError};
use pxgw::pipeline::Pipeline;
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};

/// The pipeline's caravan timeout in ns (default 50 µs).
const TIMEOUT_NS: u64 = 50_000;

fn pipeline(extra: &str) -> Pipeline<HeapBuf> {
    common::pipeline_with("", extra)
}

/// How a test datagram is framed.
#[derive(Clone, Copy, Debug)]
struct Framing {
    v6: bool,
    /// TTL or hop limit.
    ttl: u8,
    /// TPIDs of the VLAN tags, outermost first (at most two).
    tags: &'static [u16],
}

const V4: Framing = Framing {
    v6: false,
    ttl: 64,
    tags: &[],
};

/// A datagram from outside (port 5000 → 7000) with `payload`.
fn udp(f: Framing, payload: &[u8]) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: if f.v6 {
            wire::ethernet::ethertype::IPV6
        } else {
            wire::ethernet::ethertype::IPV4
        },
    };
    let ip = if f.v6 {
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src[..2].copy_from_slice(&[0x20, 0x01]);
        dst[..2].copy_from_slice(&[0x20, 0x01]);
        (src[15], dst[15]) = (1, 2);
        wire::IpRepr::V6(wire::Ipv6Repr {
            hop_limit: f.ttl,
            ..wire::Ipv6Repr::new(src, dst)
        })
    } else {
        wire::IpRepr::V4(wire::Ipv4Repr {
            ttl: f.ttl,
            ..wire::Ipv4Repr::new([198, 18, 0, 1], [198, 51, 100, 2])
        })
    };
    let udp = wire::UdpRepr {
        src_port: 5000,
        dst_port: 7000,
    };
    let mut frame = wire::udp_frame(ethernet, ip, udp, payload).unwrap();
    // Tags go in behind the addresses, innermost first (each pushes the rest back 4 bytes).
    for &tpid in f.tags.iter().rev() {
        let mut tag = tpid.to_be_bytes().to_vec();
        tag.extend_from_slice(&100u16.to_be_bytes());
        frame.splice(12..12, tag);
    }
    frame
}

/// Feeds `frames` inbound at time 0, then lets every caravan time out; returns what went inside
/// (as bytes), in order, and the pipeline.
fn inbound(px: &mut Pipeline<HeapBuf>, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    for f in frames {
        px.inbound(pool.packet(f), 0, &mut out);
    }
    px.end_of_burst(0, &mut out);
    px.poll(TIMEOUT_NS, &mut out);
    out.iter().map(|p| p.to_vec()).collect()
}

fn is_caravan(frame: &[u8]) -> bool {
    pxio::caravan::is_caravan(frame, frame.len(), pxio::caravan::DEFAULT_DSCP)
}

#[test]
fn low_ttl_datagrams_pass_unpacked_after_what_their_flow_holds() {
    for v6 in [false, true] {
        let at = |ttl| Framing { v6, ttl, ..V4 };
        let mut px = pipeline("");
        let frames = [
            udp(at(64), b"a"),
            udp(at(64), b"a2"),
            udp(at(9), b"b"),
            udp(at(9), b"b2"),
            // At the bound: a traceroute probe that may expire inside.
            udp(at(8), b"probe"),
            udp(at(1), b"probe1"),
            udp(at(64), b"c"),
            udp(at(64), b"c2"),
        ];
        let out = inbound(&mut px, &frames);
        // a and b (another TTL: another caravan) are held; b's caravan leaves before the probes,
        // which pass as they came; c travels in a third.
        assert_eq!(out.len(), 5, "v6 {v6}: {out:?}");
        assert!(is_caravan(&out[0]) && is_caravan(&out[1]), "v6 {v6}");
        assert_eq!(out[2], frames[4], "v6 {v6}: the probe passes byte for byte");
        assert_eq!(out[3], frames[5], "v6 {v6}: the probe passes byte for byte");
        assert!(is_caravan(&out[4]), "v6 {v6}");
        let c = px.report().caravan;
        assert_eq!((c.datagrams_packed, c.unpacked_low_ttl), (6, 2), "v6 {v6}");
    }
    // A bound of 0 packs everything.
    let mut px = pipeline("[caravan]\npass_ttl = 0\n");
    let low = Framing { ttl: 1, ..V4 };
    let out = inbound(&mut px, &[udp(low, b"x"), udp(low, b"y")]);
    assert_eq!(out.len(), 1);
    assert!(is_caravan(&out[0]));
}

#[test]
fn only_configured_families_are_packed() {
    let mut px = pipeline("[caravan]\nfamilies = [\"ipv4\"]\n");
    let v6 = Framing { v6: true, ..V4 };
    let frames = [udp(v6, b"six"), udp(V4, b"four"), udp(V4, b"4")];
    let out = inbound(&mut px, &frames);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0], frames[0], "IPv6 passes untouched");
    assert!(is_caravan(&out[1]), "IPv4 is packed");
    let c = px.report().caravan;
    assert_eq!((c.datagrams_packed, c.unpacked_family), (2, 1));

    // The default packs both.
    let mut px = pipeline("");
    let out = inbound(&mut px, &[udp(v6, b"six"), udp(v6, b"6")]);
    assert_eq!(out.len(), 1);
    assert!(is_caravan(&out[0]));
}

#[test]
fn one_8021q_tag_is_packed_two_tags_are_not() {
    let mut px = pipeline("");
    let one = Framing {
        tags: &[0x8100],
        ..V4
    };
    let two = Framing {
        tags: &[0x88a8, 0x8100],
        ..V4
    };
    let s_tag = Framing {
        tags: &[0x88a8],
        ..V4
    };
    let frames = [
        udp(one, b"one"),
        udp(one, b"1"),
        udp(two, b"two"),
        udp(s_tag, b"s"),
    ];
    let out = inbound(&mut px, &frames);
    // One flow: the double-tagged datagram lets the held caravan go first.
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[1], frames[2], "double-tagged passes untouched");
    assert_eq!(out[2], frames[3], "802.1ad-tagged passes untouched");
    let caravan = &out[0];
    assert!(is_caravan(caravan), "single 802.1Q tag: packed");
    assert_eq!(caravan[12..14], [0x81, 0x00], "the caravan keeps the tag");
    let c = px.report().caravan;
    assert_eq!((c.datagrams_packed, c.unpacked_vlan), (2, 2));
}

#[test]
fn families_are_validated() {
    let base = "[ports.external]\ndevice = \"a\"\n[ports.internal]\ndevice = \"b\"\n";
    let unknown = Config::parse(&format!("{base}[caravan]\nfamilies = [\"ipv5\"]\n")).unwrap_err();
    assert!(
        matches!(&unknown, ConfigError::Parse(m) if m.contains("ipv5") && m.contains("ipv6")),
        "{unknown}"
    );
    let empty = Config::parse(&format!("{base}[caravan]\nfamilies = []\n")).unwrap_err();
    assert!(
        matches!(&empty, ConfigError::Invalid { key, .. } if key == "caravan.families"),
        "{empty}"
    );
}
