//! Parse once: the PMTU tracker's `on_inbound_parsed`, which takes the pipeline's `wire::Parsed`,
//! decides exactly as `on_inbound`, which classifies the frame again, on a mix of IPv4 and IPv6,
//! UDP and TCP from outside (F-PMTUD reports, probes whole and fragmented, ordinary traffic): the
//! same frames consumed, the same reports sent, the same counters. A parse of another frame, of
//! another shape, handed in instead (here a genuine report's, which trusted would make any frame a
//! report and swallow it) is detected and made again.

mod common;

use pxgw::pmtud::{PathMtu, PathMtuConfig, PmtudSummary};
use pxio::wire::{self, tcp_flags, Class, IpRepr, Ipv4Repr, Ipv6Repr, Parsed, TcpRepr, UdpRepr};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const INSIDE: [u8; 4] = [198, 18, 8, 2];
const OUTSIDE: [[u8; 4]; 3] = [[198, 18, 7, 1], [198, 18, 7, 2], [198, 18, 7, 3]];
const INSIDE_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
const OUTSIDE_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const PORT: u16 = fpmtud::DEFAULT_PORT;
const EMTU: u16 = 1500;

fn v4(src: [u8; 4], dst: [u8; 4], df: bool) -> IpRepr {
    IpRepr::V4(Ipv4Repr {
        dont_frag: df,
        ..Ipv4Repr::new(src, dst)
    })
}

fn udp(ip: IpRepr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let udp = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    wire::udp_frame(common::FROM_OUTSIDE, ip, udp, payload).unwrap()
}

fn tcp(ip: IpRepr, syn: bool, payload: &[u8]) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: 50000,
        dst_port: 443,
        seq: 1,
        ack: u32::from(!syn),
        flags: if syn { tcp_flags::SYN } else { tcp_flags::ACK },
        window: 65000,
        urgent: 0,
        options: &[],
    };
    wire::tcp_frame(common::FROM_INSIDE, ip, tcp, payload).unwrap()
}

/// The probe an outbound SYN toward `dst` makes `pmtu` send: its UDP source port and its probe.
fn probe_toward(pmtu: &mut PathMtu, dst: [u8; 4]) -> (u16, fpmtud::wire::Probe) {
    let syn = tcp(v4(INSIDE, dst, true), true, &[]);
    let Class::Tcp(h) = wire::classify(&syn, syn.len()) else {
        panic!("a SYN is TCP")
    };
    let mut probes = Vec::new();
    pmtu.on_outbound_syn(&syn, &h, 0, &mut probes);
    assert_eq!(probes.len(), 1, "one probe toward {dst:?}");
    let Class::Udp(p) = wire::classify(&probes[0], probes[0].len()) else {
        panic!("a probe is UDP")
    };
    let probe = fpmtud::wire::Probe::parse(&probes[0][p.hdr_len()..p.frame_len()]).unwrap();
    (p.key.sport, probe)
}

/// A report from `from`'s responder to the probe `probe` sent from `sport`, listing the
/// fragment sizes `sizes` (the path MTU is the largest); `nonce_xor` forges it.
fn report(
    from: [u8; 4],
    sport: u16,
    probe: &fpmtud::wire::Probe,
    sizes: &[u16],
    nonce_xor: u64,
) -> Vec<u8> {
    let r = fpmtud::wire::Report {
        probe_id: probe.probe_id,
        nonce: probe.nonce ^ nonce_xor,
        fragments_seen: sizes.len() as u16,
        sizes: sizes.to_vec(),
    };
    udp(v4(from, INSIDE, true), PORT, sport, &r.to_bytes().unwrap())
}

/// An F-PMTUD probe from an outside prober to the inside host, whole, or as the fragments a
/// 1400 B link cuts it into.
fn probe_from_outside(id: u32, fragmented: bool) -> Vec<Vec<u8>> {
    let probe = fpmtud::wire::Probe {
        probe_id: id,
        nonce: 0xfeed_0000 + u64::from(id),
        size: EMTU,
    };
    let mut payload = vec![0u8; usize::from(EMTU) - 28];
    probe.emit(&mut payload).unwrap();
    let whole = udp(
        v4(OUTSIDE[2], INSIDE, false),
        40000 + id as u16,
        PORT,
        &payload,
    );
    if !fragmented {
        return vec![whole];
    }
    // Cut the IP payload at 1376 B (8-byte grid): MF on the first, offset on the second.
    const L3: usize = 14;
    let ip_payload = &whole[L3 + 20..];
    ip_payload
        .chunks(1376)
        .enumerate()
        .map(|(i, chunk)| {
            let mut f = whole[..L3 + 20].to_vec();
            f.extend_from_slice(chunk);
            let more = (i + 1) * 1376 < ip_payload.len();
            let offset = (i * 1376 / 8) as u16 | if more { 0x2000 } else { 0 };
            let mut ip = wire::Ipv4Packet::new_unchecked(&mut f[L3..]);
            ip.set_total_len((20 + chunk.len()) as u16);
            f[L3 + 6..L3 + 8].copy_from_slice(&offset.to_be_bytes());
            wire::Ipv4Packet::new_unchecked(&mut f[L3..L3 + 20]).fill_checksum();
            f
        })
        .collect()
}

/// How the frames are handed to the tracker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `on_inbound`: the tracker classifies.
    Classify,
    /// `on_inbound_parsed` with the frame's own parse.
    OwnParse,
    /// `on_inbound_parsed` with `decoy`'s parse (another frame, another shape).
    OtherParse,
}

/// What the tracker did with each frame, the frames it sent, its counters and its discoveries.
#[derive(Debug, PartialEq, Eq)]
struct Trace {
    consumed: Vec<bool>,
    sent: Vec<Vec<u8>>,
    summary: PmtudSummary,
    paths: Vec<(std::net::IpAddr, u16)>,
}

/// Three destinations probed, then a mix from outside: reports (genuine, forged, to the wrong
/// port), probes for the inside (whole and fragmented), and ordinary IPv4 and IPv6, UDP and TCP.
fn run(mode: Mode) -> Trace {
    let mut pmtu = PathMtu::new(PathMtuConfig {
        emtu: EMTU,
        port: PORT,
        ..PathMtuConfig::default()
    })
    .unwrap();
    let (sport_a, probe_a) = probe_toward(&mut pmtu, OUTSIDE[0]);
    let (sport_b, probe_b) = probe_toward(&mut pmtu, OUTSIDE[1]);
    let v6 = |payload: &[u8]| {
        let ip = IpRepr::V6(Ipv6Repr::new(OUTSIDE_V6, INSIDE_V6));
        udp(ip, 40000, PORT, payload)
    };
    let mut frames = vec![
        report(OUTSIDE[0], sport_a, &probe_a, &[1400, 120], 0),
        tcp(v4(OUTSIDE[1], INSIDE, true), false, &[7; 1000]),
        tcp(
            IpRepr::V6(Ipv6Repr::new(OUTSIDE_V6, INSIDE_V6)),
            false,
            &[8; 100],
        ),
        v6(&[9; 300]),
        report(OUTSIDE[1], sport_b ^ 1, &probe_b, &[1280, 240], 0),
        udp(v4(OUTSIDE[2], INSIDE, true), 53, 5353, &[1; 77]),
    ];
    frames.extend(probe_from_outside(5, false));
    frames.extend(probe_from_outside(6, true));
    frames.push(report(OUTSIDE[1], sport_b, &probe_b, &[1280, 240], 1));
    frames.push(frames[1][..40].to_vec()); // cut inside the TCP header
                                           // Last: B's genuine report (three fragments: no other frame has its length), whose parse is
                                           // the decoy handed in with every other frame.
    let decoy = report(OUTSIDE[1], sport_b, &probe_b, &[1200, 200, 120], 0);
    frames.push(decoy.clone());
    let decoy = Parsed::of(&decoy, decoy.len());

    let mut sent = Vec::new();
    let consumed = frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let now = 1_000 + i as u64;
            let own = Parsed::of(f, f.len());
            let parsed = match mode {
                Mode::OtherParse if !decoy.fits(f.len(), f.len()) => decoy,
                Mode::OtherParse => {
                    assert_eq!(
                        i,
                        frames.len() - 1,
                        "only the decoy's own frame has its shape"
                    );
                    own
                }
                _ => own,
            };
            match mode {
                Mode::Classify => pmtu.on_inbound(f, now, &mut sent),
                _ => pmtu.on_inbound_parsed(f, &parsed, now, &mut sent),
            }
        })
        .collect();
    Trace {
        consumed,
        sent,
        summary: pmtu.summary(),
        paths: pmtu
            .paths()
            .iter()
            .map(|p| (p.destination, p.pmtu))
            .collect(),
    }
}

#[test]
fn the_tracker_decides_the_same_with_the_pipelines_parse_as_when_it_classifies() {
    let classify = run(Mode::Classify);
    // The mix reached every decision: A's and B's reports (forged and genuine) consumed, the rest
    // forwarded; the two probes from outside answered; both discoveries listed.
    assert_eq!(
        classify.consumed,
        [true, false, false, false, false, false, false, false, false, true, false, true]
    );
    assert_eq!(
        (
            classify.summary.discovered,
            classify.summary.answered,
            classify.summary.fragments_in
        ),
        (2, 2, 2)
    );
    assert_eq!(
        classify.paths,
        [
            (std::net::IpAddr::from(OUTSIDE[0]), 1400),
            (std::net::IpAddr::from(OUTSIDE[1]), 1200)
        ]
    );
    assert_eq!(classify.sent.len(), 2, "one report per probe from outside");
    assert_eq!(run(Mode::OwnParse), classify, "own parse");
    assert_eq!(run(Mode::OtherParse), classify, "another frame's parse");
}

/// The frame with its IPv4 ID and header checksum blanked, the two fields unpacking rewrites.
fn comparable(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    if f[12..14] == [0x08, 0x00] {
        f[18..20].fill(0);
        f[24..26].fill(0);
    }
    f
}

/// Datagrams of two flows, IPv4 and IPv6, plain and chained (headers in one segment, payload in
/// another), interleaved with TCP from outside, go in as caravans and come back out as themselves;
/// outbound TCP and UDP that fit the eMTU leave untouched (without being parsed a second time),
/// those above it are split or fragmented. Every stage took the pipeline's one parse; this pins
/// what the user sees of it, in both families.
#[test]
fn the_pipeline_round_trips_both_families_on_its_one_parse() {
    let pool = HeapPool::new(256);
    let mut px = common::pipeline_with("", "");
    let v6 = IpRepr::V6(Ipv6Repr::new(OUTSIDE_V6, INSIDE_V6));
    let datagram = |i: usize| {
        let ip = if i.is_multiple_of(2) {
            v4(OUTSIDE[0], INSIDE, true)
        } else {
            v6
        };
        udp(ip, 5000, 6000, &vec![i as u8; 1 + i * 97 % 1400])
    };
    let sent: Vec<Vec<u8>> = (0..12).map(datagram).collect();
    let mut to_int = Vec::new();
    for (i, d) in sent.iter().enumerate() {
        let pkt = if i % 3 == 2 {
            let hdr = d.len() - (1 + i * 97 % 1400);
            HeapBuf::from_segments(&pool, &[&d[..hdr], &d[hdr..]])
        } else {
            pool.packet(d)
        };
        px.inbound(pkt, 10, &mut to_int);
        // Unknown TCP from outside passes as it came, in both families.
        let ip = if i.is_multiple_of(2) {
            v4(OUTSIDE[1], INSIDE, true)
        } else {
            v6
        };
        px.inbound(
            pool.packet(&tcp(ip, false, &[i as u8; 200])),
            10,
            &mut to_int,
        );
    }
    px.end_of_burst(10, &mut to_int);
    px.poll(10 + 1_000_000, &mut to_int);
    let inside: Vec<Vec<u8>> = to_int.iter().map(PacketBuf::to_vec).collect();
    let caravans: Vec<&Vec<u8>> = inside
        .iter()
        .filter(|f| pxio::caravan::is_caravan(f, f.len(), pxio::caravan::DEFAULT_DSCP))
        .collect();
    assert_eq!(inside.len() - caravans.len(), 12, "the TCP segments pass");
    let c = px.report().caravan;
    assert!(caravans.len() >= 2, "a caravan per family at least");
    assert_eq!(c.caravans_built, caravans.len() as u64);
    assert_eq!(
        c.datagrams_packed, 12,
        "every datagram travelled in a caravan"
    );

    // Back out: the caravans are unpacked into the datagrams, each flow in its order.
    let mut to_ext = Vec::new();
    for f in &caravans {
        px.outbound(pool.packet(f), 20, &mut to_ext);
    }
    let back: Vec<Vec<u8>> = to_ext.iter().map(|p| comparable(&p.to_vec())).collect();
    for family in 0..2 {
        let want: Vec<Vec<u8>> = sent
            .iter()
            .skip(family)
            .step_by(2)
            .map(|d| comparable(d))
            .collect();
        let got: Vec<Vec<u8>> = back
            .iter()
            .filter(|f| (f[12..14] == [0x86, 0xdd]) == (family == 1))
            .cloned()
            .collect();
        assert_eq!(
            got, want,
            "family {family}: the datagrams as they were sent"
        );
    }
    let r = px.report();
    assert_eq!(
        (r.caravan.caravans_unpacked, r.caravan.datagrams_unpacked),
        (caravans.len() as u64, 12)
    );

    // Outbound TCP at the eMTU (1500 B IP packets) leaves untouched; one byte more is split in
    // two. UDP at the eMTU leaves untouched; one byte more is fragmented (DF clear).
    to_ext.clear();
    let v6_out = IpRepr::V6(Ipv6Repr::new(INSIDE_V6, OUTSIDE_V6));
    let at_emtu = [
        tcp(v4(INSIDE, OUTSIDE[0], true), false, &[1; 1500 - 40]),
        tcp(v6_out, false, &[2; 1500 - 60]),
        udp(v4(INSIDE, OUTSIDE[0], false), 6000, 5000, &[3; 1500 - 28]),
        udp(v6_out, 6000, 5000, &[4; 1500 - 48]),
    ];
    for f in &at_emtu {
        px.outbound(pool.packet(f), 30, &mut to_ext);
    }
    let out: Vec<Vec<u8>> = to_ext.iter().map(PacketBuf::to_vec).collect();
    assert_eq!(out, at_emtu, "at the eMTU: untouched");
    to_ext.clear();
    px.outbound(
        pool.packet(&tcp(
            v4(INSIDE, OUTSIDE[0], true),
            false,
            &[5; 1500 - 40 + 1],
        )),
        40,
        &mut to_ext,
    );
    px.outbound(
        pool.packet(&udp(
            v4(INSIDE, OUTSIDE[0], false),
            6000,
            5000,
            &[6; 1500 - 28 + 1],
        )),
        40,
        &mut to_ext,
    );
    assert_eq!(to_ext.len(), 4, "two segments, two fragments");
    assert!(to_ext.iter().all(|p| p.len() <= 14 + 1500));
    let r = px.report();
    assert_eq!(
        (r.split.packets, r.split.segments, r.router.fragmented),
        (1, 2, 1)
    );
    drop((to_int, to_ext, px));
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}
