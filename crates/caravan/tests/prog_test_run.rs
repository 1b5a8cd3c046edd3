//! BPF_PROG_TEST_RUN unit tests of the caravan-ebpf classifier (needs root and the object from
//! `cargo xtask build-ebpf`): non-caravan packets pass unchanged, malformed caravans are dropped
//! and counted, and nothing else is counted.

use caravan::{Decap, DecapConfig, Stats};
use pxio::wire;

const TC_ACT_OK: i32 = 0;
const TC_ACT_SHOT: i32 = 2;
const SPORT: u16 = 40000;
const DPORT: u16 = 5001;
/// Offsets of the untagged IPv4 test frames: the IP header and the outer UDP header.
const L3: usize = wire::ethernet::field::HEADER_LEN;
const L4: usize = L3 + wire::ipv4::field::HEADER_LEN;

/// An inner UDP datagram (header + payload) with the given length field.
fn inner(sport: u16, dport: u16, len_field: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&len_field.to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

fn good(payload: &[u8]) -> Vec<u8> {
    inner(SPORT, DPORT, (payload.len() + 8) as u16, payload)
}

/// Ethernet + IPv4 (DSCP `dscp`) + UDP around `udp_payload`; `udp_len` overrides the UDP
/// length field when given.
fn frame(dscp: u8, udp_payload: &[u8], udp_len: Option<u16>) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [0x02, 0, 0, 0, 0, 2],
        src: [0x02, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: wire::ethernet::ethertype::IPV4,
    };
    let ip = wire::IpRepr::V4(wire::Ipv4Repr {
        dscp,
        ident: 0x1234,
        dont_frag: true,
        ..wire::Ipv4Repr::new([198, 18, 0, 1], [198, 18, 0, 2])
    });
    let udp = wire::UdpRepr {
        src_port: SPORT,
        dst_port: DPORT,
    };
    let mut f = wire::udp_frame(ethernet, ip, udp, udp_payload).expect("a small test frame");
    if let Some(len) = udp_len {
        wire::UdpPacket::new_unchecked(&mut f[L4..]).set_len(len);
    }
    f
}

fn decap() -> Decap {
    Decap::load(DecapConfig::default()).expect("load caravan-ebpf (root, `cargo xtask build-ebpf`)")
}

fn run(decap: &mut Decap, frame: &[u8]) -> (i32, Vec<u8>) {
    let mut out = vec![0u8; frame.len() + 256];
    let (verdict, len) = decap.test_run(frame, &mut out).expect("BPF_PROG_TEST_RUN");
    out.truncate(len);
    (verdict, out)
}

#[test]
fn non_caravan_passes_unchanged() {
    let mut decap = decap();
    let payload: Vec<u8> = [good(b"hello"), good(b"world")].concat();
    let mut cases = vec![
        // Plain UDP (DSCP 0) whose payload even looks like a caravan.
        frame(0, &payload, None),
        // Another DSCP.
        frame(46, &payload, None),
        // Marked, but a fragment: not a caravan.
        {
            let mut f = frame(7, &payload, None);
            f[L3 + wire::ipv4::field::FLG_OFF.start] = 0x20; // MF
            f
        },
        // Marked, but TCP.
        {
            let mut f = frame(7, &payload, None);
            f[L3 + wire::ipv4::field::PROTOCOL] = wire::ip_proto::TCP;
            f
        },
    ];
    // Not IPv4 at all (ARP-like ethertype).
    let mut arp = frame(7, &payload, None);
    wire::EthernetFrame::new_unchecked(&mut arp[..]).set_ethertype(wire::ethernet::ethertype::ARP);
    cases.push(arp);
    for f in &cases {
        let (verdict, out) = run(&mut decap, f);
        assert_eq!(verdict, TC_ACT_OK);
        assert_eq!(&out, f, "a non-caravan packet must pass byte for byte");
    }
    assert_eq!(decap.stats().unwrap(), Stats::default(), "nothing counted");
}

#[test]
fn malformed_caravans_are_dropped_and_counted() {
    let mut decap = decap();
    let two = [good(b"hello"), good(b"world!")].concat();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        // Inner lengths sum beyond the outer payload.
        (
            "inner length runs past the end",
            frame(
                7,
                &[good(b"abc"), inner(SPORT, DPORT, 200, b"xyz")].concat(),
                None,
            ),
        ),
        // Inner lengths sum short of the outer payload (trailing bytes).
        (
            "trailing bytes",
            frame(7, &[two.clone(), vec![1, 2, 3]].concat(), None),
        ),
        (
            "zero-length segment",
            frame(7, &inner(SPORT, DPORT, 0, b""), None),
        ),
        (
            "length below 8",
            frame(7, &inner(SPORT, DPORT, 7, b""), None),
        ),
        (
            "port mismatch",
            frame(7, &[good(b"a"), inner(SPORT, 9, 9, b"b")].concat(), None),
        ),
        ("empty caravan", frame(7, &[], None)),
        (
            "IP and UDP lengths disagree",
            frame(7, &two, Some((8 + two.len() - 1) as u16)),
        ),
        (
            "more datagrams than the bound",
            frame(
                7,
                &(0..65).flat_map(|_| good(b"")).collect::<Vec<u8>>(),
                None,
            ),
        ),
    ];
    // Truncated: the IP total length promises more than the frame holds.
    let mut truncated = frame(7, &two, None);
    truncated.truncate(truncated.len() - 4);
    cases.push(("truncated frame", truncated));
    for (i, (what, f)) in cases.iter().enumerate() {
        let (verdict, _) = run(&mut decap, f);
        assert_eq!(verdict, TC_ACT_SHOT, "{what}: must be dropped");
        let stats = decap.stats().unwrap();
        assert_eq!(
            stats.malformed,
            i as u64 + 1,
            "{what}: counted as malformed"
        );
        assert_eq!(stats.datagrams, 0, "{what}: nothing delivered");
        assert_eq!(stats.caravans, 0, "{what}: not counted as a caravan");
    }
}

#[test]
fn caravan_to_passthrough_port_is_delivered_whole() {
    let mut decap = decap();
    decap.add_passthrough_port(DPORT).unwrap();
    let f = frame(7, &[good(b"one"), good(b"two")].concat(), None);
    let (verdict, out) = run(&mut decap, &f);
    assert_eq!(verdict, TC_ACT_OK);
    assert_eq!(out, f);
    let stats = decap.stats().unwrap();
    assert_eq!(
        (stats.caravans, stats.passed_through, stats.datagrams),
        (1, 1, 0)
    );
}
