//! BPF_PROG_TEST_RUN unit tests of the caravan-ebpf classifier (needs root and the object from
//! `cargo xtask build-ebpf`), for IPv4 and IPv6, untagged and behind one 802.1Q tag: non-caravan
//! packets pass unchanged (marked ones without a caravan header, caravans of an unknown
//! version and caravans whose outer checksums fail, counted), malformed caravans are dropped and
//! counted, valid ones are cut into their datagrams, and nothing else is counted.

use caravan::{Decap, DecapConfig, Stats};
use caravan_common::format;
use netlab::Netns;
use pxio::wire;

const TC_ACT_OK: i32 = 0;
const TC_ACT_SHOT: i32 = 2;
/// A valid caravan: the original, cut down to its last datagram, follows the clones.
const TC_ACT_REDIRECT: i32 = 7;
const SPORT: u16 = 40000;
const DPORT: u16 = 5001;
/// A VLAN tag's TCI: priority 3, VLAN 100.
const TCI: u16 = (3 << 13) | 100;

/// How a test frame is built: the IP family and whether it carries one 802.1Q tag.
#[derive(Clone, Copy, Debug)]
struct Shape {
    v6: bool,
    vlan: bool,
}

/// Every shape the decapsulator handles.
const SHAPES: [Shape; 4] = [
    Shape {
        v6: false,
        vlan: false,
    },
    Shape {
        v6: true,
        vlan: false,
    },
    Shape {
        v6: false,
        vlan: true,
    },
    Shape {
        v6: true,
        vlan: true,
    },
];

impl Shape {
    /// Offset of the IP header.
    fn l3(self) -> usize {
        wire::ethernet::field::HEADER_LEN
            + usize::from(self.vlan) * wire::ethernet::field::VLAN_TAG_LEN
    }

    /// Offset of the outer UDP header.
    fn l4(self) -> usize {
        self.l3()
            + if self.v6 {
                wire::ipv6::field::HEADER_LEN
            } else {
                wire::ipv4::field::HEADER_LEN
            }
    }

    /// Ethernet (tagged or not) + IP (DSCP `dscp`) + UDP around `udp_payload`; `udp_len`
    /// overrides the UDP length field when given.
    fn frame(self, dscp: u8, udp_payload: &[u8], udp_len: Option<u16>) -> Vec<u8> {
        let ethernet = wire::EthernetRepr {
            dst: [0x02, 0, 0, 0, 0, 2],
            src: [0x02, 0, 0, 0, 0, 1],
            vlan_tci: self.vlan.then_some(TCI),
            ethertype: if self.v6 {
                wire::ethernet::ethertype::IPV6
            } else {
                wire::ethernet::ethertype::IPV4
            },
        };
        let ip = if self.v6 {
            let mut src = [0u8; 16];
            src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
            let mut dst = src;
            (src[15], dst[15]) = (1, 2);
            wire::IpRepr::V6(wire::Ipv6Repr {
                dscp,
                ecn: 1,
                flow_label: 0xabcde,
                ..wire::Ipv6Repr::new(src, dst)
            })
        } else {
            wire::IpRepr::V4(wire::Ipv4Repr {
                dscp,
                ident: 0x1234,
                dont_frag: true,
                ..wire::Ipv4Repr::new([198, 18, 0, 1], [198, 18, 0, 2])
            })
        };
        let udp = wire::UdpRepr {
            src_port: SPORT,
            dst_port: DPORT,
        };
        let mut f = wire::udp_frame(ethernet, ip, udp, udp_payload).expect("a small test frame");
        if let Some(len) = udp_len {
            wire::UdpPacket::new_unchecked(&mut f[self.l4()..]).set_len(len);
        }
        f
    }

    /// `frame` as a fragment: IPv4 with MF set, IPv6 with a Fragment header announced.
    fn fragment(self, dscp: u8, udp_payload: &[u8]) -> Vec<u8> {
        let mut f = self.frame(dscp, udp_payload, None);
        if self.v6 {
            f[self.l3() + wire::ipv6::field::NEXT_HEADER] = 44;
        } else {
            f[self.l3() + wire::ipv4::field::FLG_OFF.start] = 0x20; // MF
        }
        f
    }

    /// `frame` carrying TCP instead of UDP (the bytes stay).
    fn tcp(self, dscp: u8, udp_payload: &[u8]) -> Vec<u8> {
        let mut f = self.frame(dscp, udp_payload, None);
        if self.v6 {
            f[self.l3() + wire::ipv6::field::NEXT_HEADER] = wire::ip_proto::TCP;
        } else {
            f[self.l3() + wire::ipv4::field::PROTOCOL] = wire::ip_proto::TCP;
        }
        f
    }
}

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

/// `body` (inner datagrams back to back, well formed or not) behind the caravan header a packer
/// would write for it: it counts the headers found by walking the length fields.
fn caravan(body: &[u8]) -> Vec<u8> {
    let (mut at, mut count) = (0, 0u8);
    while at + 8 <= body.len() {
        count = count.wrapping_add(1);
        at += usize::from(u16::from_be_bytes([body[at + 4], body[at + 5]])).max(8);
    }
    [&format::encode_header(count)[..], body].concat()
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
    let payload: Vec<u8> = caravan(&[good(b"hello"), good(b"world")].concat());
    for shape in SHAPES {
        let mut cases = vec![
            // Plain UDP (DSCP 0) whose payload is even a whole caravan.
            shape.frame(0, &payload, None),
            // Another DSCP.
            shape.frame(46, &payload, None),
            // Marked, but a fragment: not a caravan.
            shape.fragment(7, &payload),
            // Marked, but TCP.
            shape.tcp(7, &payload),
        ];
        // Not IP at all (ARP-like ethertype).
        let mut arp = shape.frame(7, &payload, None);
        let at = shape.l3() - 2;
        arp[at..at + 2].copy_from_slice(&wire::ethernet::ethertype::ARP.to_be_bytes());
        cases.push(arp);
        // Marked, behind two tags (802.1ad outside, 802.1Q inside): never packed, passed.
        if shape.vlan {
            let mut qinq = shape.frame(7, &payload, None);
            let outer_tag = [0x88, 0xa8, 0x00, 0x07];
            qinq.splice(12..12, outer_tag);
            cases.push(qinq.clone());
            // Two 802.1Q tags.
            qinq[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
            cases.push(qinq);
        }
        for f in &cases {
            let (verdict, out) = run(&mut decap, f);
            assert_eq!(verdict, TC_ACT_OK, "{shape:?}");
            assert_eq!(
                &out, f,
                "{shape:?}: a non-caravan packet must pass byte for byte"
            );
        }
    }
    assert_eq!(decap.stats().unwrap(), Stats::default(), "nothing counted");
}

#[test]
fn malformed_caravans_are_dropped_and_counted() {
    let mut decap = decap();
    let two = caravan(&[good(b"hello"), good(b"world!")].concat());
    let mut n = 0;
    for shape in SHAPES {
        let mut cases: Vec<(&str, Vec<u8>)> = vec![
            // Inner lengths sum beyond the outer payload.
            (
                "inner length runs past the end",
                shape.frame(
                    7,
                    &caravan(&[good(b"abc"), inner(SPORT, DPORT, 200, b"xyz")].concat()),
                    None,
                ),
            ),
            // Inner lengths sum short of the outer payload (trailing bytes).
            (
                "trailing bytes",
                shape.frame(7, &[two.clone(), vec![1, 2, 3]].concat(), None),
            ),
            (
                "zero-length segment",
                shape.frame(7, &caravan(&inner(SPORT, DPORT, 0, b"")), None),
            ),
            (
                "length below 8",
                shape.frame(7, &caravan(&inner(SPORT, DPORT, 7, b"")), None),
            ),
            (
                "port mismatch",
                shape.frame(
                    7,
                    &caravan(&[good(b"a"), inner(SPORT, 9, 9, b"b")].concat()),
                    None,
                ),
            ),
            ("empty caravan", shape.frame(7, &caravan(&[]), None)),
            (
                "IP and UDP lengths disagree",
                shape.frame(7, &two, Some((8 + two.len() - 1) as u16)),
            ),
            (
                "more datagrams than the bound",
                shape.frame(
                    7,
                    &caravan(&(0..65).flat_map(|_| good(b"")).collect::<Vec<u8>>()),
                    None,
                ),
            ),
            (
                "the header's count differs",
                shape.frame(
                    7,
                    &[&format::encode_header(3)[..], &two[format::HEADER_LEN..]].concat(),
                    None,
                ),
            ),
        ];
        // Truncated: the IP length promises more than the frame holds.
        let mut truncated = shape.frame(7, &two, None);
        truncated.truncate(truncated.len() - 4);
        cases.push(("truncated frame", truncated));
        for (what, f) in &cases {
            n += 1;
            let (verdict, _) = run(&mut decap, f);
            assert_eq!(verdict, TC_ACT_SHOT, "{shape:?}, {what}: must be dropped");
            let stats = decap.stats().unwrap();
            assert_eq!(
                stats.malformed, n,
                "{shape:?}, {what}: counted as malformed"
            );
            assert_eq!(stats.datagrams, 0, "{shape:?}, {what}: nothing delivered");
            assert_eq!(
                stats.caravans, 0,
                "{shape:?}, {what}: not counted as a caravan"
            );
        }
    }
}

/// A valid caravan is consumed and every datagram handed on (the clones go to the loopback
/// device of a scratch namespace, where nothing listens).
#[test]
fn valid_caravans_are_cut_into_their_datagrams() {
    let ns = Netns::new("cvtr").unwrap();
    ns.enter(|| {
        let mut decap = decap();
        let mut want = Stats::default();
        for shape in SHAPES {
            for payloads in [
                vec![good(b"one")],
                vec![good(b"one"), good(b""), good(&[7; 1000])],
                (0..64).map(|i| good(&vec![i as u8; i])).collect(),
            ] {
                let f = shape.frame(7, &caravan(&payloads.concat()), None);
                let (verdict, out) = run(&mut decap, &f);
                assert_eq!(
                    verdict, TC_ACT_REDIRECT,
                    "{shape:?}: the original follows the clones"
                );
                assert_eq!(
                    last_datagram(shape, &out),
                    payloads.last().unwrap().as_slice(),
                    "{shape:?}: the original is cut down to the last datagram"
                );
                want.caravans += 1;
                want.datagrams += payloads.len() as u64;
                assert_eq!(
                    decap.stats().unwrap(),
                    want,
                    "{shape:?}, {} datagrams: all delivered, no helper error",
                    payloads.len()
                );
            }
        }
    })
    .unwrap();
}

#[test]
fn caravan_to_passthrough_port_is_delivered_whole() {
    let mut decap = decap();
    decap.add_passthrough_port(DPORT).unwrap();
    for (i, shape) in SHAPES.into_iter().enumerate() {
        let f = shape.frame(7, &caravan(&[good(b"one"), good(b"two")].concat()), None);
        let (verdict, out) = run(&mut decap, &f);
        assert_eq!(verdict, TC_ACT_OK, "{shape:?}");
        assert_eq!(out, f, "{shape:?}");
        let stats = decap.stats().unwrap();
        let n = i as u64 + 1;
        assert_eq!(
            (stats.caravans, stats.passed_through, stats.datagrams),
            (n, n, 0),
            "{shape:?}"
        );
    }
}

/// An ordinary UDP datagram that merely wears the caravan's DSCP is not a
/// caravan: it passes byte for byte, never dropped.
#[test]
fn an_ordinary_marked_datagram_passes_untouched() {
    let mut decap = decap();
    for shape in SHAPES {
        for payload in [
            &b"an ordinary datagram that happens to wear DSCP 7"[..],
            b"",
            &[0u8; 3],
        ] {
            let f = shape.frame(7, payload, None);
            let (verdict, out) = run(&mut decap, &f);
            assert_eq!(verdict, TC_ACT_OK, "{shape:?}: must pass, not be dropped");
            assert_eq!(out, f, "{shape:?}: byte for byte");
        }
    }
    let stats = decap.stats().unwrap();
    assert_eq!((stats.malformed, stats.caravans), (0, 0));
    assert_eq!(
        stats.marked_plain,
        3 * SHAPES.len() as u64,
        "counted as what they are"
    );
}

/// A marked datagram whose payload happens to be a chain of UDP headers with the flow's ports
/// (what a caravan body looks like) but carries no caravan header is not rewritten.
#[test]
fn a_caravan_looking_payload_without_the_header_passes_untouched() {
    let mut decap = decap();
    for shape in SHAPES {
        let body = [good(b"hello"), good(b"world")].concat();
        let sealed = caravan(&body);
        for payload in [
            body.clone(),
            // The magic and the version, but a check that does not verify: not a caravan header.
            with(&sealed, |c| c[format::header::CHECK] ^= 1),
            with(&sealed, |c| c[format::header::COUNT] = 3),
        ] {
            let f = shape.frame(7, &payload, None);
            let (verdict, out) = run(&mut decap, &f);
            assert_eq!(verdict, TC_ACT_OK, "{shape:?}: must pass, not be cut up");
            assert_eq!(out, f, "{shape:?}: byte for byte");
        }
    }
    let stats = decap.stats().unwrap();
    assert_eq!(
        (stats.caravans, stats.datagrams, stats.malformed),
        (0, 0, 0)
    );
    assert_eq!(stats.marked_plain, 3 * SHAPES.len() as u64);
}

/// A caravan header of a version the program does not know (a newer packer's) is not unpacked
/// and not refused as malformed: the packet passes untouched, counted (`docs/caravan.md`,
/// "Versions").
#[test]
fn an_unknown_version_passes_untouched_and_counted() {
    let mut decap = decap();
    let body = caravan(&[good(b"hello"), good(b"world")].concat());
    for shape in SHAPES {
        for version in [0u8, 2, 0xff] {
            let f = shape.frame(
                7,
                &with(&body, |c| c[format::header::VERSION] = version),
                None,
            );
            let (verdict, out) = run(&mut decap, &f);
            assert_eq!(verdict, TC_ACT_OK, "{shape:?}, version {version}");
            assert_eq!(out, f, "{shape:?}, version {version}: byte for byte");
        }
    }
    let stats = decap.stats().unwrap();
    assert_eq!(stats.unknown_version, 3 * SHAPES.len() as u64);
    assert_eq!(
        (stats.malformed, stats.caravans, stats.datagrams),
        (0, 0, 0)
    );
}

/// A caravan of three datagrams (two past the 256 B and 512 B marks, with odd lengths) in
/// `shape`, then the same frame with each outer checksum broken in every way the test knows:
/// `(what, frame)`. Every byte the outer UDP checksum covers is a candidate: the caravan
/// header's neighbours, inner headers and payload at even and odd offsets, and the last bytes
/// (the sum's tail).
fn broken_checksums(shape: Shape) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let body = caravan(&[good(&[0x5a; 701]), good(b"x"), good(&[0xa5; 290])].concat());
    let f = shape.frame(7, &body, None);
    let (l3, l4) = (shape.l3(), shape.l4());
    let mut cases = vec![
        (
            "UDP checksum field".to_owned(),
            with(&f, |c| c[l4 + format::udp::CHECKSUM] ^= 0x10),
        ),
        (
            "zero UDP checksum (none computed)".to_owned(),
            with(&f, |c| {
                c[l4 + format::udp::CHECKSUM..l4 + format::udp::CHECKSUM + 2].fill(0)
            }),
        ),
    ];
    let payload = l4 + format::UDP_HEADER_LEN + format::HEADER_LEN;
    let mut offsets: Vec<usize> = [6, 7, 8, 9, 10, 255, 256, 257, 511, 512, 513, 709, 718]
        .iter()
        .map(|o| payload + o)
        .collect();
    offsets.extend((1..=5).map(|back| f.len() - back));
    for at in offsets {
        cases.push((
            format!("payload byte {}", at - l4),
            with(&f, |c| c[at] ^= 0x01),
        ));
    }
    if !shape.v6 {
        cases.push((
            "IPv4 header checksum".to_owned(),
            with(&f, |c| c[l3 + wire::ipv4::field::CHECKSUM.start] ^= 0x01),
        ));
        cases.push((
            "IPv4 TTL, header checksum not updated".to_owned(),
            with(&f, |c| c[l3 + wire::ipv4::field::TTL] ^= 0x01),
        ));
    }
    (f, cases)
}

/// A caravan whose outer IPv4 header checksum or outer UDP checksum does not verify (or whose
/// UDP checksum is zero: none computed, which no packer sends) is damaged or forged. The
/// program passes it byte for byte, never rewritten, cut or dropped, for the kernel to judge
/// as any datagram, and counts it. The same caravan with its checksums intact is unpacked.
#[test]
fn a_caravan_with_a_bad_outer_checksum_passes_untouched() {
    let ns = Netns::new("cvck").unwrap();
    ns.enter(|| {
        let mut decap = decap();
        let mut bad = 0;
        for shape in SHAPES {
            let (good_frame, cases) = broken_checksums(shape);
            for (what, f) in &cases {
                let (verdict, out) = run(&mut decap, f);
                assert_eq!(verdict, TC_ACT_OK, "{shape:?}, {what}: must pass");
                assert!(out == *f, "{shape:?}, {what}: byte for byte");
            }
            bad += cases.len() as u64;
            let (verdict, _) = run(&mut decap, &good_frame);
            assert_eq!(
                verdict, TC_ACT_REDIRECT,
                "{shape:?}: the intact caravan is unpacked"
            );
        }
        let stats = decap.stats().unwrap();
        assert_eq!(stats.bad_checksum, bad, "each counted");
        assert_eq!(
            (
                stats.caravans,
                stats.datagrams,
                stats.malformed,
                stats.marked_plain
            ),
            (SHAPES.len() as u64, 3 * SHAPES.len() as u64, 0, 0),
            "only the intact caravans were unpacked"
        );
    })
    .unwrap();
}

/// Valid caravans of every outer UDP length class the checksum walk distinguishes (the length
/// mod 4, below, at and past 256 B steps, up to what `BPF_PROG_TEST_RUN` takes in one page) are
/// all unpacked.
#[test]
fn valid_caravans_of_every_length_are_unpacked() {
    let ns = Netns::new("cvln").unwrap();
    ns.enter(|| {
        let mut decap = decap();
        let mut sizes: Vec<usize> = (0..=9).collect();
        for step in [256usize, 512, 768, 1024, 2048] {
            // The outer UDP payload is 8 (caravan header) + 8 (inner header) + size.
            let at = step - 24;
            sizes.extend(at - 4..=at + 4);
        }
        sizes.push(3000);
        let mut want = Stats::default();
        for shape in SHAPES {
            for &size in &sizes {
                let payload: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
                let f = shape.frame(7, &caravan(&good(&payload)), None);
                let (verdict, out) = run(&mut decap, &f);
                assert_eq!(verdict, TC_ACT_REDIRECT, "{shape:?}, {size} B: unpacked");
                assert_eq!(
                    last_datagram(shape, &out),
                    good(&payload),
                    "{shape:?}, {size} B: the original carries the datagram"
                );
                want.caravans += 1;
                want.datagrams += 1;
            }
        }
        assert_eq!(decap.stats().unwrap(), want);
    })
    .unwrap();
}

/// The UDP datagram (header and payload) of a frame the program handed on, as its IP length
/// gives it: any tag is in the metadata by then, so the IP header follows the Ethernet header.
fn last_datagram(shape: Shape, out: &[u8]) -> &[u8] {
    let l3 = wire::ethernet::field::HEADER_LEN;
    let (hdr, udp_len) = if shape.v6 {
        let len = u16::from_be_bytes([out[l3 + 4], out[l3 + 5]]);
        (wire::ipv6::field::HEADER_LEN, usize::from(len))
    } else {
        let tot = u16::from_be_bytes([out[l3 + 2], out[l3 + 3]]);
        (wire::ipv4::field::HEADER_LEN, usize::from(tot) - 20)
    };
    &out[l3 + hdr..l3 + hdr + udp_len]
}

fn with(bytes: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = bytes.to_vec();
    f(&mut v);
    v
}
