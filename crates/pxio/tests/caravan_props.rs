//! PX-caravan round trips (SIGCOMM'26 §6): whatever datagrams go in come out, byte for byte,
//! and malformed caravans are refused whole.

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use proptest::prelude::*;
use pxio::caravan::{self, CaravanBuilder, CaravanConfig, CaravanError, Malformed};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const MAC: ([u8; 6], [u8; 6]) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);

fn datagram(v6: bool, payload: &[u8], ip_id: u16) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2(MAC.0, MAC.1);
    let mut v = Vec::new();
    if v6 {
        let mut a = [0u8; 16];
        a[0] = 0x20;
        a[1] = 0x01;
        let mut b = a;
        b[15] = 2;
        eth.ipv6(a, b, 64)
            .udp(5000, 6000)
            .write(&mut v, payload)
            .unwrap();
    } else {
        let mut h = etherparse::Ipv4Header::new(
            0,
            64,
            etherparse::IpNumber::UDP,
            [198, 18, 0, 1],
            [198, 18, 0, 2],
        )
        .unwrap();
        h.identification = ip_id;
        eth.ip(etherparse::IpHeaders::Ipv4(h, Default::default()))
            .udp(5000, 6000)
            .write(&mut v, payload)
            .unwrap();
    }
    v
}

/// Packs `frames` into caravans (a new one whenever the current is full), unpacks them, and
/// returns (caravan frames, unpacked frames).
fn round_trip(
    frames: &[Vec<u8>],
    cfg: CaravanConfig,
    pool: &HeapPool,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut caravans = Vec::new();
    let mut open: Option<CaravanBuilder<HeapBuf>> = None;
    for f in frames {
        let d = pool.packet(f);
        let d = match open.as_mut() {
            Some(b) => match b.push(d) {
                Ok(()) => continue,
                Err((CaravanError::Full, d)) => {
                    caravans.push(open.take().unwrap().finish());
                    d
                }
                Err((e, _)) => panic!("push: {e}"),
            },
            None => d,
        };
        open = Some(
            CaravanBuilder::start(d, cfg, pool)
                .map_err(|(e, _)| e)
                .unwrap(),
        );
    }
    if let Some(b) = open {
        caravans.push(b.finish());
    }
    let caravan_bytes: Vec<Vec<u8>> = caravans.iter().map(PacketBuf::to_vec).collect();
    let mut out = Vec::new();
    for c in caravans {
        caravan::unpack(c, &cfg, pool, &mut out)
            .map_err(|(e, _)| e)
            .unwrap();
    }
    (caravan_bytes, out.iter().map(PacketBuf::to_vec).collect())
}

/// The frame with its IPv4 ID and header checksum blanked: the two fields a caravan regenerates.
fn comparable(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    if f[12..14] == [0x08, 0x00] {
        f[18..20].fill(0);
        f[24..26].fill(0);
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn caravans_round_trip_any_datagram_sizes(
        v6 in any::<bool>(),
        sizes in prop::collection::vec(prop_oneof![0usize..64, 0usize..1472, 8900usize..8952], 1..80),
        seed in any::<u8>(),
        imtu in prop_oneof![Just(9000u16), 1500u16..=9000],
    ) {
        let hdr = if v6 { 48 } else { 28 };
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let n = n.min(usize::from(imtu) - hdr - caravan::OVERHEAD); // each fits a caravan alone
                let payload: Vec<u8> = (0..n).map(|k| seed.wrapping_add((k * 31 + i) as u8)).collect();
                datagram(v6, &payload, i as u16)
            })
            .collect();
        let pool = HeapPool::new(256);
        let cfg = CaravanConfig { imtu, ..CaravanConfig::default() };
        let (caravans, unpacked) = round_trip(&frames, cfg, &pool);
        prop_assert_eq!(unpacked.len(), frames.len());
        for (a, b) in frames.iter().zip(&unpacked) {
            prop_assert_eq!(comparable(a), comparable(b), "datagram restored exactly");
            // The IPv4 header checksum of every restored datagram verifies.
            let p = SlicedPacket::from_ethernet(b).unwrap();
            if let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net {
                prop_assert_eq!(ip.header().to_header().calc_header_checksum(), ip.header().header_checksum());
            }
        }
        for c in &caravans {
            prop_assert!(c.len() - 14 <= usize::from(imtu), "caravan within the iMTU");
            let l4 = if v6 { 14 + 40 } else { 14 + 20 };
            prop_assert_eq!(&c[l4 + 8..l4 + 12], &caravan::MAGIC, "the caravan header's magic");
            prop_assert_eq!(c[l4 + 12], caravan::VERSION, "its version");
            // Each caravan is a valid UDP packet: DSCP mark, outer checksum verifies.
            let p = SlicedPacket::from_ethernet(c).unwrap();
            let Some(TransportSlice::Udp(udp)) = &p.transport else { panic!("not UDP") };
            let header = udp.to_header();
            let expected = match p.net.as_ref().unwrap() {
                etherparse::NetSlice::Ipv4(ip) => {
                    prop_assert_eq!(ip.header().dcp().value(), caravan::DEFAULT_DSCP);
                    header.calc_checksum_ipv4(&ip.header().to_header(), udp.payload()).unwrap()
                }
                etherparse::NetSlice::Ipv6(ip) => {
                    prop_assert_eq!(ip.header().traffic_class() >> 2, caravan::DEFAULT_DSCP);
                    header.calc_checksum_ipv6(&ip.header().to_header(), udp.payload()).unwrap()
                }
                etherparse::NetSlice::Arp(_) => unreachable!("UDP is never carried over ARP"),
            };
            prop_assert_eq!(header.checksum, expected, "outer UDP checksum");
        }
        drop(caravans);
        prop_assert_eq!(pool.in_use(), 0, "no buffer leaked");
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let pool = HeapPool::new(256);
        let mut out = Vec::new();
        let mut frame = datagram(false, &[], 0)[..34].to_vec();
        frame[15] = caravan::DEFAULT_DSCP << 2;
        frame.extend_from_slice(&bytes);
        let _ = caravan::unpack(pool.packet(&frame), &CaravanConfig::default(), &pool, &mut out);
        drop(out);
        prop_assert_eq!(pool.in_use(), 0);
    }
}

/// A caravan of three datagrams, then mangled in each malformed way a receiver must refuse.
#[test]
fn malformed_caravans_are_refused_whole() {
    let pool = HeapPool::new(256);
    let cfg = CaravanConfig::default();
    let frames: Vec<Vec<u8>> = [10usize, 0, 300]
        .iter()
        .map(|&n| datagram(false, &vec![9; n], 0))
        .collect();
    let (caravans, _) = round_trip(&frames, cfg, &pool);
    let good = caravans[0].clone();
    let header = 14 + 20 + 8; // the caravan header
    let inner0 = header + 8; // first inner UDP header
    let cases: Vec<(Vec<u8>, CaravanError)> = vec![
        // An inner length that overruns the caravan.
        (
            with(&good, |f| {
                f[inner0 + 4..inner0 + 6].copy_from_slice(&2000u16.to_be_bytes())
            }),
            CaravanError::Malformed(Malformed::LengthMismatch),
        ),
        // A zero-length inner datagram.
        (
            with(&good, |f| {
                f[inner0 + 4..inner0 + 6].copy_from_slice(&0u16.to_be_bytes())
            }),
            CaravanError::Malformed(Malformed::ZeroLength),
        ),
        // Inner ports that are not the flow's.
        (
            with(&good, |f| {
                f[inner0..inner0 + 2].copy_from_slice(&1u16.to_be_bytes())
            }),
            CaravanError::Malformed(Malformed::PortMismatch),
        ),
        // Truncated: the outer length claims 3 fewer bytes, so the last datagram overruns.
        (
            truncated(&good, 3),
            CaravanError::Malformed(Malformed::LengthMismatch),
        ),
        // Truncated inside an inner header.
        (
            truncated(&good, 300 + 8 + 5),
            CaravanError::Malformed(Malformed::Truncated),
        ),
        // The count the caravan header declares differs.
        (
            with(&good, |f| {
                f[header..header + 8].copy_from_slice(&caravan::format::encode_header(2))
            }),
            CaravanError::Malformed(Malformed::CountMismatch),
        ),
        // The caravan header's check fails: no caravan header, an ordinary datagram.
        (
            with(&good, |f| f[header + 7] ^= 1),
            CaravanError::NotCaravan,
        ),
        // Not marked.
        (with(&good, |f| f[15] = 0), CaravanError::NotCaravan),
        // Marked, but no caravan header (the magic is gone): an ordinary datagram.
        (with(&good, |f| f[header] = b'Q'), CaravanError::NotCaravan),
        // A caravan header of another version: not understood.
        (
            with(&good, |f| f[header + 4] = 2),
            CaravanError::UnknownVersion(2),
        ),
    ];
    for (frame, expected) in cases {
        let mut out = Vec::new();
        let got = caravan::unpack(pool.packet(&frame), &cfg, &pool, &mut out).map_err(|(e, _)| e);
        assert_eq!(got, Err(expected));
        assert!(out.is_empty(), "nothing delivered from a malformed caravan");
    }
    let few = CaravanConfig {
        max_datagrams: 2,
        ..cfg
    };
    let mut out = Vec::new();
    let got = caravan::unpack(pool.packet(&good), &few, &pool, &mut out).map_err(|(e, _)| e);
    assert_eq!(got, Err(CaravanError::Malformed(Malformed::TooMany)));
    drop(caravans);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn packing_refuses_what_it_cannot_carry() {
    let pool = HeapPool::new(256);
    let cfg = CaravanConfig::default();
    let first = pool.packet(&datagram(false, b"a", 1));
    let mut b = CaravanBuilder::start(first, cfg, &pool).unwrap();
    // Another flow.
    let other = {
        let mut f = datagram(false, b"b", 2);
        f[36..38].copy_from_slice(&6001u16.to_be_bytes()); // dst port; UDP checksum now stale but irrelevant
        pool.packet(&f)
    };
    assert!(matches!(b.push(other), Err((CaravanError::Mismatch, _))));
    // A length shorter than the IP header cannot fit (it used to underflow and panic), for
    // IPv4 and IPv6 alike; a small datagram still does.
    assert!(!b.fits(10));
    assert!(!b.fits(0));
    assert!(b.fits(28 + 1));
    let b6 = CaravanBuilder::start(pool.packet(&datagram(true, b"a", 1)), cfg, &pool).unwrap();
    assert!(!b6.fits(39));
    assert!(b6.fits(48 + 1));
    drop(b6.finish());
    // A DSCP that a caravan would lose.
    let mut ef = datagram(false, b"c", 3);
    ef[15] = 46 << 2;
    assert!(matches!(
        b.push(pool.packet(&ef)),
        Err((CaravanError::Dscp(46), _))
    ));
    // TCP.
    let tcp = {
        let mut v = Vec::new();
        PacketBuilder::ethernet2(MAC.0, MAC.1)
            .ipv4([1, 1, 1, 1], [2, 2, 2, 2], 9)
            .tcp(1, 2, 3, 4)
            .write(&mut v, b"x")
            .unwrap();
        v
    };
    assert!(matches!(
        CaravanBuilder::start(pool.packet(&tcp), cfg, &pool),
        Err((CaravanError::NotUdp, _))
    ));
    assert_eq!(b.count(), 1);
    drop(b);
    assert_eq!(pool.in_use(), 0);
}

fn with(frame: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = frame.to_vec();
    f(&mut v);
    v
}

/// Shortens the caravan by `n` bytes, fixing the outer IP and UDP lengths so it still parses as
/// UDP (the damage is only inside).
fn truncated(frame: &[u8], n: usize) -> Vec<u8> {
    let mut v = frame[..frame.len() - n].to_vec();
    let ip_len = (v.len() - 14) as u16;
    v[16..18].copy_from_slice(&ip_len.to_be_bytes());
    v[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    v
}

/// A marked datagram whose payload is a chain of UDP headers with the flow's ports (what a
/// caravan body looks like) without a caravan header: not a caravan, left alone.
#[test]
fn a_caravan_body_without_its_header_is_not_a_caravan() {
    let pool = HeapPool::new(256);
    let mut body = Vec::new();
    for p in [&b"hello"[..], b"world"] {
        body.extend_from_slice(&5000u16.to_be_bytes());
        body.extend_from_slice(&6000u16.to_be_bytes());
        body.extend_from_slice(&((p.len() + 8) as u16).to_be_bytes());
        body.extend_from_slice(&[0, 0]);
        body.extend_from_slice(p);
    }
    let mut frame = datagram(false, &body, 0);
    frame[15] = caravan::DEFAULT_DSCP << 2;
    assert!(!caravan::is_caravan(
        &frame,
        frame.len(),
        caravan::DEFAULT_DSCP
    ));
    let mut out = Vec::new();
    let got = caravan::unpack(
        pool.packet(&frame),
        &CaravanConfig::default(),
        &pool,
        &mut out,
    )
    .map_err(|(e, _)| e);
    assert_eq!(got, Err(CaravanError::NotCaravan));
    assert!(out.is_empty());
}

/// `can_pair` answers what `start` then `push` would do, without taking either datagram.
#[test]
fn can_pair_agrees_with_start_then_push() {
    let pool = HeapPool::new(256);
    let cfg = CaravanConfig {
        imtu: 1500,
        ..CaravanConfig::default()
    };
    let a = datagram(false, b"first", 1);
    let other_flow = {
        let mut f = datagram(false, b"b", 2);
        f[36..38].copy_from_slice(&6001u16.to_be_bytes());
        f
    };
    let other_ttl = {
        let mut f = datagram(false, b"b", 2);
        f[22] = 9;
        f
    };
    let dscp46 = {
        let mut f = datagram(false, b"b", 2);
        f[15] = 46 << 2;
        f
    };
    let cases = [
        (datagram(false, b"second", 2), true),
        (datagram(false, &[0; 1400], 2), true),
        // 20 + (8 + 5) + 16 + (8 + 1444) = 1501: one byte over the iMTU.
        (datagram(false, &[0; 1444], 2), false),
        (other_flow, false),
        (other_ttl, false),
        (dscp46, false),
    ];
    for (second, fits) in cases {
        let (first, second) = (pool.packet(&a), pool.packet(&second));
        let verdict = caravan::can_pair(&first, &second, &cfg);
        assert_eq!(verdict.is_ok(), fits, "{verdict:?}");
        let built = CaravanBuilder::start(first, cfg, &pool)
            .map_err(|(e, _)| e)
            .and_then(|mut b| b.push(second).map_err(|(e, _)| e));
        assert_eq!(built.is_ok(), fits, "{built:?}");
        assert_eq!(verdict.err(), built.err());
    }
    assert_eq!(pool.in_use(), 0);
}
