//! Parse once: the caravan entry points that take the caller's `wire::Parsed` (`packable_parsed`,
//! `can_pair_parsed`, `CaravanBuilder::start_parsed`/`push_parsed`, `is_caravan_parsed`,
//! `parse_parsed`, `unpack_parsed`) give exactly what the entry points that classify again give,
//! on a mix of IPv4 and IPv6, UDP and TCP, plain and chained packets: the same verdicts, the same
//! caravans byte for byte, the same counts, the same unpacked datagrams. A parse of another
//! packet, of another shape, handed in instead is detected (`Parsed::fits`) and made again: the
//! results stay the same.

use std::collections::BTreeMap;

use proptest::prelude::*;
use pxio::caravan::{self, CaravanBuilder, CaravanConfig, SameFlowRefused};
use pxio::wire::{
    self, tcp_flags, EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, Parsed, TcpRepr, UdpRepr,
};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const ETH: EthernetRepr = EthernetRepr {
    dst: [2, 0, 0, 0, 0, 2],
    src: [2, 0, 0, 0, 0, 1],
    vlan_tci: None,
    ethertype: 0,
};
const V4: ([u8; 4], [u8; 4]) = ([198, 18, 0, 1], [198, 18, 0, 2]);
const V6: ([u8; 16], [u8; 16]) = (
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
);
/// The caravan mark the tests configure (the default).
const MARK: u8 = caravan::DEFAULT_DSCP;

/// What one packet of the mix is: a flow and how its headers differ from the flow's usual ones.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// UDP of flow `0..4` (flows 0 and 2 IPv4, 1 and 3 IPv6), DSCP 0.
    Udp(u8),
    /// UDP of flow `0..4` wearing the caravan mark (packed, the mark removed on unpacking).
    Marked(u8),
    /// UDP of flow `0..4` with another DSCP (never packed: it would be lost).
    OtherDscp(u8),
    /// UDP of flow `0..4` with TTL / hop limit 9 (cannot join its flow's caravan).
    LowTtl(u8),
    /// UDP of flow 0 with an 802.1Q tag (its L2 header differs from the flow's).
    Tagged,
    /// IPv4 UDP of flow 0 with IP options (never packed).
    Ipv4Options,
    /// UDP of flow `0..4` whose frame carries six bytes of Ethernet padding behind its IP
    /// packet.
    Padded(u8),
    /// UDP of flow `0..4` whose UDP length is one more than its IP payload (malformed).
    BadUdpLength(u8),
    /// UDP of flow `0..4` whose IP length claims more bytes than its frame has (malformed).
    Truncated(u8),
    /// TCP, IPv4 or IPv6.
    Tcp(bool),
}

impl Kind {
    /// The flow the test's packer files the packet under (its own bookkeeping, independent of
    /// any parse).
    fn flow(self) -> u8 {
        match self {
            Kind::Udp(f)
            | Kind::Marked(f)
            | Kind::OtherDscp(f)
            | Kind::LowTtl(f)
            | Kind::Padded(f)
            | Kind::BadUdpLength(f)
            | Kind::Truncated(f) => f % 4,
            Kind::Tagged | Kind::Ipv4Options => 0,
            Kind::Tcp(v6) => 4 + u8::from(v6),
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        6 => (0u8..4).prop_map(Kind::Udp),
        2 => (0u8..4).prop_map(Kind::Marked),
        1 => (0u8..4).prop_map(Kind::OtherDscp),
        1 => (0u8..4).prop_map(Kind::LowTtl),
        1 => Just(Kind::Tagged),
        1 => Just(Kind::Ipv4Options),
        1 => (0u8..4).prop_map(Kind::Padded),
        1 => (0u8..4).prop_map(Kind::BadUdpLength),
        1 => (0u8..4).prop_map(Kind::Truncated),
        2 => any::<bool>().prop_map(Kind::Tcp),
    ]
}

/// The frame of a packet of `kind` with `payload_len` bytes of payload (its bytes derived from
/// `seed`).
fn frame(kind: Kind, payload_len: usize, seed: u8) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len)
        .map(|i| seed.wrapping_add(i as u8))
        .collect();
    let (flow, dscp, ttl) = match kind {
        Kind::Udp(f) | Kind::Padded(f) | Kind::BadUdpLength(f) | Kind::Truncated(f) => {
            (f % 4, 0, 64)
        }
        Kind::Marked(f) => (f % 4, MARK, 64),
        Kind::OtherDscp(f) => (f % 4, 10, 64),
        Kind::LowTtl(f) => (f % 4, 0, 9),
        Kind::Tagged | Kind::Ipv4Options => (0, 0, 64),
        Kind::Tcp(v6) => {
            let tcp = TcpRepr {
                src_port: 40000,
                dst_port: 443,
                seq: u32::from(seed),
                ack: 1,
                flags: tcp_flags::ACK,
                window: 512,
                urgent: 0,
                options: &[],
            };
            return wire::tcp_frame(ETH, ip(v6, 0, 64), tcp, &payload).unwrap();
        }
    };
    let v6 = flow % 2 == 1;
    let udp = UdpRepr {
        src_port: 5000 + u16::from(flow),
        dst_port: 6000,
    };
    let eth = EthernetRepr {
        vlan_tci: matches!(kind, Kind::Tagged).then_some(100),
        ..ETH
    };
    let mut f = wire::udp_frame(eth, ip(v6, dscp, ttl), udp, &payload).unwrap();
    let l4 = 14 + if v6 { 40 } else { 20 };
    match kind {
        Kind::Padded(_) => f.extend_from_slice(&[0xee; 6]),
        Kind::BadUdpLength(_) => {
            let len = u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]) + 1;
            f[l4 + 4..l4 + 6].copy_from_slice(&len.to_be_bytes());
        }
        // The last payload byte (or the UDP checksum's second) cut off the frame.
        Kind::Truncated(_) => {
            f.pop();
        }
        _ => {}
    }
    if matches!(kind, Kind::Ipv4Options) {
        // Four bytes of options (NOP, NOP, NOP, end of list): IHL 6, total length + 4.
        const L3: usize = 14;
        f.splice(L3 + 20..L3 + 20, [1, 1, 1, 0]);
        f[L3] = 0x46;
        let total = u16::from_be_bytes([f[L3 + 2], f[L3 + 3]]) + 4;
        let mut ip = wire::Ipv4Packet::new_unchecked(&mut f[L3..L3 + 24]);
        ip.set_total_len(total);
        ip.fill_checksum();
    }
    f
}

fn ip(v6: bool, dscp: u8, ttl: u8) -> IpRepr {
    if v6 {
        IpRepr::V6(Ipv6Repr {
            dscp,
            hop_limit: ttl,
            ..Ipv6Repr::new(V6.0, V6.1)
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            dscp,
            ttl,
            dont_frag: true,
            ..Ipv4Repr::new(V4.0, V4.1)
        })
    }
}

/// How the packer hands each packet to pxio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The entry points that classify the packet themselves.
    Classify,
    /// The `_parsed` entry points, with the packet's own parse.
    OwnParse,
    /// The `_parsed` entry points, with a parse of another packet, of another shape: they must
    /// notice, classify the packet themselves, and give the same results.
    OtherParse,
    /// [`CaravanBuilder::push_same_flow`] first on every packet for a flow's open caravan (it
    /// reads header bytes only), then the `_parsed` entry points with the packet's own parse
    /// for what it gives back: a datagram it refuses as full brings its parse, which must be
    /// the packet's own.
    SameFlow,
}

/// A packet of the mix, as the packer receives it.
struct Input {
    kind: Kind,
    bytes: Vec<u8>,
    /// Where the packet is cut into two segments (after its headers), if it is.
    cut: Option<usize>,
}

impl Input {
    fn buf(&self, pool: &HeapPool) -> HeapBuf {
        match self.cut {
            Some(at) => HeapBuf::from_segments(pool, &[&self.bytes[..at], &self.bytes[at..]]),
            None => pool.packet(&self.bytes),
        }
    }
}

/// A parse of another packet than `pkt`, of another shape, chosen by `pick` among the ways one
/// can go wrong: the same flow's packet with two more payload bytes (trusted, its lengths would
/// cut the datagram wrong), a packet of the other family, a TCP segment, or `pkt`'s own bytes
/// in one segment when `pkt` is chained (same length, another first segment).
fn other_parse(pkt: &HeapBuf, kind: Kind, pick: usize) -> Parsed {
    let bytes = pkt.to_vec();
    let payload = bytes.len().saturating_sub(42);
    let decoy = match pick % 4 {
        0 => frame(kind, payload + 2, 7),
        1 => frame(Kind::Udp(kind.flow() + 1), payload + 3, 9),
        2 => frame(Kind::Tcp(bytes.len().is_multiple_of(2)), payload + 5, 11),
        _ if pkt.num_segs() > 1 => bytes.clone(),
        _ => frame(Kind::Udp(kind.flow()), payload + 2, 13),
    };
    let parsed = Parsed::of(&decoy, decoy.len());
    assert!(
        !parsed.fits(pkt.head().len(), pkt.len()),
        "the decoy must have another shape"
    );
    parsed
}

/// Everything the packer saw pxio do: every verdict and count, every frame that left.
#[derive(Debug, Default, PartialEq, Eq)]
struct Trace {
    events: Vec<String>,
    frames: Vec<Vec<u8>>,
}

/// What a flow holds: a lone datagram (and the parse it came with) or an open caravan.
enum Held {
    Lone(HeapBuf, Parsed),
    Caravan(CaravanBuilder<HeapBuf>),
}

/// The parse `mode` hands in with `pkt` (the pick varies the decoy).
fn parse_for(mode: Mode, pkt: &HeapBuf, kind: Kind, pick: usize) -> Parsed {
    match mode {
        Mode::OtherParse => other_parse(pkt, kind, pick),
        _ => Parsed::of(pkt.head(), pkt.len()),
    }
}

/// Packs the mix as pxgw's pipeline does (a lone datagram is held until a second joins it; a
/// datagram that does not join closes what its flow holds), then checks and unpacks everything
/// that left, all through the entry points of `mode`.
fn run(inputs: &[Input], cfg: CaravanConfig, mode: Mode) -> Trace {
    let pool = HeapPool::new(256);
    let mut t = Trace::default();
    let mut held: BTreeMap<u8, Held> = BTreeMap::new();
    let mut sent: Vec<HeapBuf> = Vec::new();
    let close = |h: Held, sent: &mut Vec<HeapBuf>| match h {
        Held::Lone(p, _) => sent.push(p),
        Held::Caravan(b) => sent.push(b.finish()),
    };
    for (i, input) in inputs.iter().enumerate() {
        let pkt = input.buf(&pool);
        let parsed = parse_for(mode, &pkt, input.kind, i);
        let flow = input.kind.flow();
        let pkt = match held.remove(&flow) {
            Some(Held::Caravan(mut b)) => {
                let r = match mode {
                    Mode::Classify => b.push(pkt),
                    Mode::SameFlow => match b.push_same_flow(pkt) {
                        Ok(()) => Ok(()),
                        Err(SameFlowRefused::Full(pkt, full_parse)) => {
                            assert_eq!(
                                full_parse, parsed,
                                "{i}: the parse a full caravan gives back"
                            );
                            Err((caravan::CaravanError::Full, pkt))
                        }
                        Err(SameFlowRefused::Other(pkt)) => b.push_parsed(pkt, &parsed),
                    },
                    _ => b.push_parsed(pkt, &parsed),
                };
                t.events.push(format!(
                    "{i} push {:?} count {} ip_len {}",
                    r.as_ref().map_err(|(e, _)| *e),
                    b.count(),
                    b.ip_len()
                ));
                match r {
                    Ok(()) => {
                        held.insert(flow, Held::Caravan(b));
                        continue;
                    }
                    Err((_, pkt)) => {
                        close(Held::Caravan(b), &mut sent);
                        pkt
                    }
                }
            }
            Some(Held::Lone(first, first_parsed)) => {
                if mode == Mode::SameFlow {
                    // Told from the header bytes alone: only ever a yes that the full check
                    // gives too, with the packet's own parse.
                    if let Some(p) = caravan::pairs_by_headers(&first, &first_parsed, &pkt, &cfg) {
                        assert_eq!(p, parsed, "{i}: the parse pairs_by_headers gives");
                        let full =
                            caravan::can_pair_parsed(&first, &first_parsed, &pkt, &parsed, &cfg);
                        assert_eq!(full, Ok(()), "{i}: pairs_by_headers said yes");
                    }
                }
                let r = match mode {
                    Mode::Classify => caravan::can_pair(&first, &pkt, &cfg),
                    _ => caravan::can_pair_parsed(&first, &first_parsed, &pkt, &parsed, &cfg),
                };
                t.events.push(format!("{i} can_pair {r:?}"));
                if r.is_ok() {
                    let started = match mode {
                        Mode::Classify => CaravanBuilder::start(first, cfg, &pool),
                        _ => CaravanBuilder::start_parsed(first, &first_parsed, cfg, &pool),
                    };
                    let mut b = started.map_err(|(e, _)| e).expect("can_pair said yes");
                    let r = match mode {
                        Mode::Classify => b.push(pkt),
                        Mode::SameFlow => b.push_same_flow(pkt).or_else(|refused| match refused {
                            SameFlowRefused::Other(pkt) | SameFlowRefused::Full(pkt, _) => {
                                b.push_parsed(pkt, &parsed)
                            }
                        }),
                        _ => b.push_parsed(pkt, &parsed),
                    };
                    assert!(r.is_ok(), "can_pair said yes");
                    t.events.push(format!(
                        "{i} paired count {} ip_len {}",
                        b.count(),
                        b.ip_len()
                    ));
                    held.insert(flow, Held::Caravan(b));
                    continue;
                }
                close(Held::Lone(first, first_parsed), &mut sent);
                pkt
            }
            None => pkt,
        };
        let r = match mode {
            Mode::Classify => caravan::packable(&pkt, &cfg),
            _ => caravan::packable_parsed(&pkt, &parsed, &cfg),
        };
        t.events.push(format!("{i} packable {r:?}"));
        match r {
            Ok(()) => {
                held.insert(flow, Held::Lone(pkt, parsed));
            }
            Err(_) => sent.push(pkt),
        }
    }
    for (_, h) in std::mem::take(&mut held) {
        close(h, &mut sent);
    }
    // The receiving side: what is a caravan is unpacked, through the same kind of entry point.
    let mut out = Vec::new();
    for (j, pkt) in sent.into_iter().enumerate() {
        t.frames.push(pkt.to_vec());
        let parsed = parse_for(mode, &pkt, Kind::Udp(0), j);
        let head = pkt.head().to_vec();
        let (seen, checked) = match mode {
            Mode::Classify => (
                caravan::is_caravan(&head, pkt.len(), MARK),
                caravan::parse(&pkt, &cfg),
            ),
            _ => (
                caravan::is_caravan_parsed(&head, pkt.len(), &parsed, MARK),
                caravan::parse_parsed(&pkt, &parsed, &cfg),
            ),
        };
        let v6 = pkt.head()[12..14] == [0x86, 0xdd];
        t.events.push(format!(
            "sent {j} v6 {v6} is_caravan {seen} parse {checked:?}"
        ));
        let r = match mode {
            Mode::Classify => caravan::unpack(pkt, &cfg, &pool, &mut out),
            _ => caravan::unpack_parsed(pkt, &parsed, &cfg, &pool, &mut out),
        };
        t.events
            .push(format!("sent {j} unpack {:?}", r.map_err(|(e, _)| e)));
    }
    t.frames.extend(out.iter().map(PacketBuf::to_vec));
    t
}

fn inputs(mix: &[(Kind, usize, bool, u8)]) -> Vec<Input> {
    mix.iter()
        .map(|&(kind, payload_len, chained, seed)| {
            let bytes = frame(kind, payload_len, seed);
            // Headers in the first segment, payload (at least one byte) in the second.
            let cut = (chained && payload_len > 0).then(|| bytes.len() - payload_len);
            Input { kind, bytes, cut }
        })
        .collect()
}

/// The three modes on one mix: identical traces. Returns the trace, for the callers' own checks.
fn same_in_every_mode(mix: &[(Kind, usize, bool, u8)], imtu: u16) -> Trace {
    let inputs = inputs(mix);
    let cfg = CaravanConfig {
        imtu,
        ..CaravanConfig::default()
    };
    let classify = run(&inputs, cfg, Mode::Classify);
    let own = run(&inputs, cfg, Mode::OwnParse);
    assert_eq!(own, classify, "own parse vs classify again");
    let other = run(&inputs, cfg, Mode::OtherParse);
    assert_eq!(other, classify, "another packet's parse vs classify again");
    let same_flow = run(&inputs, cfg, Mode::SameFlow);
    assert_eq!(same_flow, classify, "header bytes first vs classify again");
    classify
}

#[test]
fn a_fixed_mix_of_both_families_packs_and_unpacks_the_same_with_or_without_a_parse() {
    let mix = [
        (Kind::Udp(0), 100, false, 1),
        (Kind::Udp(1), 200, false, 2),
        (Kind::Udp(0), 300, true, 3),
        (Kind::Tcp(false), 1000, false, 4),
        (Kind::Udp(1), 50, true, 5),
        (Kind::Marked(0), 70, false, 6),
        (Kind::Tcp(true), 500, true, 7),
        (Kind::LowTtl(1), 80, false, 8),
        (Kind::Udp(1), 1400, false, 9),
        (Kind::Udp(1), 1400, false, 10),
        (Kind::OtherDscp(2), 60, false, 11),
        (Kind::Udp(2), 60, false, 12),
        (Kind::Tagged, 40, false, 13),
        (Kind::Ipv4Options, 40, false, 14),
        (Kind::Udp(3), 0, false, 15),
        (Kind::Udp(3), 1200, true, 16),
        (Kind::Udp(0), 10, false, 17),
    ];
    let t = same_in_every_mode(&mix, 1500);
    // The mix really exercised what it names: caravans built and unpacked in both families,
    // datagrams refused for each reason.
    for needle in [
        "v6 false is_caravan true",
        "v6 true is_caravan true",
        "unpack Ok(2)",
        "NotUdp",
        "Dscp(10)",
        "Mismatch",
        "Full",
        "is_caravan false",
    ] {
        assert!(
            t.events.iter().any(|e| e.contains(needle)),
            "{needle} never happened: {:#?}",
            t.events
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn any_mix_packs_and_unpacks_the_same_with_or_without_a_parse(
        mix in prop::collection::vec(
            (kind(), prop_oneof![0usize..64, 0usize..1500, 3900usize..4000], any::<bool>(), any::<u8>()),
            1..48,
        ),
        imtu in prop_oneof![Just(1500u16), Just(4000u16), Just(9000u16)],
    ) {
        same_in_every_mode(&mix, imtu);
    }
}

/// The header-bytes shortcut says yes where it should, in both families, and leaves every
/// difference a caravan cannot carry, and every malformed datagram, to the full check.
#[test]
fn pairs_by_headers_takes_a_flows_next_datagram_and_nothing_else() {
    let pool = HeapPool::new(64);
    let cfg = CaravanConfig::default();
    for flow in [0u8, 1] {
        let first = pool.packet(&frame(Kind::Udp(flow), 300, 1));
        let first_parsed = Parsed::of(first.head(), first.len());
        let next = |kind, len| pool.packet(&frame(kind, len, 2));
        let second = next(Kind::Udp(flow), 1200);
        assert_eq!(
            caravan::pairs_by_headers(&first, &first_parsed, &second, &cfg),
            Some(Parsed::of(second.head(), second.len())),
            "flow {flow}"
        );
        for kind in [
            Kind::Udp(flow + 2), // another flow of the same family
            Kind::LowTtl(flow),
            Kind::Marked(flow),
            Kind::OtherDscp(flow),
            Kind::BadUdpLength(flow),
            Kind::Truncated(flow),
        ] {
            let other = next(kind, 1200);
            assert_eq!(
                caravan::pairs_by_headers(&first, &first_parsed, &other, &cfg),
                None,
                "{kind:?}"
            );
        }
        // Too large for one caravan together.
        let big = next(Kind::Udp(flow), 8900);
        assert_eq!(
            caravan::pairs_by_headers(&first, &first_parsed, &big, &cfg),
            None
        );
    }
}
