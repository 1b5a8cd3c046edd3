//! F-PMTUD inside the gateway: an inside host's SYN makes pxgw probe the destination; the
//! report that comes back caps the split size; probes from outside are answered.

mod common;

use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};
use pxgw::pipeline::Pipeline;
use pxgw::pmtud::PROBE_SOURCE_PORT;
use pxio::{HeapBuf, HeapPool, PacketBuf};

const OUTSIDE: [u8; 4] = [198, 18, 7, 1];
const INSIDE: [u8; 4] = [198, 18, 8, 2];

/// A pipeline whose ports hash with the well-known symmetric key (the checks below compute the
/// probe's hash with it).
fn pipeline() -> Pipeline<HeapBuf> {
    common::pipeline_with("", "[rss]\nkey = 0x6d5a\n")
}

fn tcp_from_inside(syn: bool, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ipv4(INSIDE, OUTSIDE, 64)
        .tcp(50000, 443, 1, 65000);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

/// (src port, dst port, UDP payload, IP length, DF) of an IPv4/UDP frame.
fn udp_of(frame: &[u8]) -> (u16, u16, Vec<u8>, usize, bool) {
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
        panic!("not IPv4")
    };
    let Some(TransportSlice::Udp(u)) = &p.transport else {
        panic!("not UDP")
    };
    (
        u.source_port(),
        u.destination_port(),
        u.payload().to_vec(),
        ip.header().total_len() as usize,
        ip.header().dont_fragment(),
    )
}

#[test]
fn a_new_destination_is_probed_and_the_report_caps_the_split_size() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline();
    let (mut to_ext, mut replies) = (Vec::new(), Vec::new());
    px.outbound(pool.packet(&tcp_from_inside(true, &[])), 1_000, &mut to_ext);
    px.take_replies(&mut replies);
    assert_eq!(replies.len(), 1, "one probe now");
    let probe = replies.pop().unwrap().to_vec();
    let (sport, dport, payload, ip_len, df) = udp_of(&probe);
    assert_eq!(
        (dport, ip_len, df),
        (fpmtud::DEFAULT_PORT, 1500, false),
        "eMTU-sized, DF clear"
    );
    // The probe's source port keeps it (and its report) on the SYN's RSS queue: same low 9 bits
    // of the symmetric hash, the index into a redirection table of up to 512 entries.
    let t = pxio::toeplitz::Toeplitz::symmetric();
    assert!(sport >= PROBE_SOURCE_PORT);
    assert_eq!(
        t.hash_v4(INSIDE, OUTSIDE, sport, dport) & 0x1ff,
        t.hash_v4(INSIDE, OUTSIDE, 50000, 443) & 0x1ff
    );
    assert_eq!(
        t.hash_v4(OUTSIDE, INSIDE, dport, sport),
        t.hash_v4(INSIDE, OUTSIDE, sport, dport),
        "the report hashes like the probe"
    );
    assert_eq!(&probe[26..30], &INSIDE, "sent on the inside host's behalf");
    let probe = fpmtud::wire::Probe::parse(&payload).unwrap();

    // A forged report (wrong nonce) is swallowed but ignored; the genuine one says 1400.
    let report = |nonce: u64| {
        let r = fpmtud::wire::Report {
            probe_id: probe.probe_id,
            nonce,
            fragments_seen: 2,
            sizes: vec![1400, 120],
        };
        let mut v = Vec::new();
        PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4(OUTSIDE, INSIDE, 60)
            .udp(fpmtud::DEFAULT_PORT, sport)
            .write(&mut v, &r.to_bytes().unwrap())
            .unwrap();
        pool.packet(&v)
    };
    let mut to_int = Vec::new();
    px.inbound(report(probe.nonce ^ 1), 2_000, &mut to_int);
    px.inbound(report(probe.nonce), 3_000, &mut to_int);
    assert!(
        to_int.is_empty(),
        "reports to the gateway's probes are not forwarded"
    );
    let s = px.report().pmtud;
    assert_eq!((s.probed, s.discovered, s.cached), (1, 1, 1));
    // The statistics name the destination and its path MTU (`pmtud.paths` in --stats-json).
    let paths = px.report().pmtud_paths;
    assert_eq!(paths.len(), 1);
    assert_eq!(
        (paths[0].destination, paths[0].pmtu),
        (std::net::IpAddr::from(OUTSIDE), 1400)
    );

    // Data toward that destination is now cut to 1400 B.
    px.outbound(
        pool.packet(&tcp_from_inside(false, &[5u8; 6000])),
        4_000,
        &mut to_ext,
    );
    let sizes: Vec<usize> = to_ext.iter().skip(1).map(|p| p.len() - 14).collect();
    assert!(
        !sizes.is_empty() && sizes.iter().all(|&s| s <= 1400),
        "{sizes:?}"
    );
}

#[test]
fn an_unanswered_probe_falls_back_to_the_emtu() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline();
    let (mut to_ext, mut replies) = (Vec::new(), Vec::new());
    px.outbound(pool.packet(&tcp_from_inside(true, &[])), 0, &mut to_ext);
    // The second probe and the timeout, driven by polls.
    let mut t = 0;
    while px.next_deadline().is_some() && t < 10_000_000_000 {
        t = px.next_deadline().unwrap();
        px.poll(t, &mut Vec::new());
    }
    px.take_replies(&mut replies);
    assert_eq!(replies.len(), 2, "two probes, then the round gives up");
    let s = px.report().pmtud;
    assert_eq!((s.fallbacks, s.cached), (1, 0));
    px.outbound(
        pool.packet(&tcp_from_inside(false, &[5u8; 6000])),
        t,
        &mut to_ext,
    );
    assert!(to_ext.iter().skip(1).all(|p| p.len() - 14 <= 1500));
}

#[test]
fn a_probe_from_outside_is_answered_and_still_forwarded() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline();
    let probe = fpmtud::wire::Probe {
        probe_id: 9,
        nonce: 0xfeed,
        size: 1500,
    };
    let mut payload = vec![0u8; 1500 - 28];
    probe.emit(&mut payload).unwrap();
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(OUTSIDE, INSIDE, 60)
        .udp(40000, fpmtud::DEFAULT_PORT)
        .write(&mut v, &payload)
        .unwrap();
    let mut to_int = Vec::new();
    px.inbound(pool.packet(&v), 1, &mut to_int);
    px.end_of_burst(1, &mut to_int);
    assert_eq!(to_int.len(), 1, "forwarded inside as well");
    let mut replies = Vec::new();
    px.take_replies(&mut replies);
    assert_eq!(replies.len(), 1);
    let (sport, dport, payload, _, _) = udp_of(&replies[0].to_vec());
    assert_eq!((sport, dport), (fpmtud::DEFAULT_PORT, 40000));
    let report = fpmtud::wire::Report::parse(&payload).unwrap();
    assert_eq!((report.nonce, report.sizes.clone()), (0xfeed, vec![1500]));
    assert_eq!(px.report().pmtud.answered, 1);
}

/// The fragments of an IPv4/UDP datagram from outside to the responder, as a router with a
/// 1400 B link cuts them: 1396 B, then the rest (offsets on the 8-byte grid).
fn fragmented_probe_from_outside(probe: &fpmtud::wire::Probe) -> Vec<Vec<u8>> {
    let mut payload = vec![0u8; usize::from(probe.size) - 28];
    probe.emit(&mut payload).unwrap();
    let mut datagram = Vec::new();
    etherparse::UdpHeader::with_ipv4_checksum(
        40000,
        fpmtud::DEFAULT_PORT,
        &ip(0, 0, false, 0),
        &payload,
    )
    .unwrap()
    .write(&mut datagram)
    .unwrap();
    datagram.extend_from_slice(&payload);
    datagram
        .chunks(1376)
        .enumerate()
        .map(|(i, chunk)| {
            let more = (i + 1) * 1376 < datagram.len();
            let mut v = Vec::new();
            etherparse::Ethernet2Header {
                source: [2, 0, 0, 0, 0, 1],
                destination: [2, 0, 0, 0, 0, 2],
                ether_type: etherparse::EtherType::IPV4,
            }
            .write(&mut v)
            .unwrap();
            ip(chunk.len() as u16, (i * 1376 / 8) as u16, more, 77)
                .write(&mut v)
                .unwrap();
            v.extend_from_slice(chunk);
            v
        })
        .collect()
}

/// An IPv4 header from outside to inside, UDP, DF clear.
fn ip(payload_len: u16, offset_units: u16, more: bool, id: u16) -> etherparse::Ipv4Header {
    let mut h =
        etherparse::Ipv4Header::new(payload_len, 60, etherparse::IpNumber::UDP, OUTSIDE, INSIDE)
            .unwrap();
    h.dont_fragment = false;
    h.more_fragments = more;
    h.fragment_offset = etherparse::IpFragOffset::try_new(offset_units).unwrap();
    h.identification = id;
    h
}

#[test]
fn a_probe_fragmented_on_the_way_is_answered_with_its_fragment_sizes() {
    let pool = HeapPool::new(4096);
    let mut px = pipeline();
    let probe = fpmtud::wire::Probe {
        probe_id: 3,
        nonce: 0xbeef,
        size: 1500,
    };
    let frames = fragmented_probe_from_outside(&probe);
    let ip_sizes: Vec<usize> = frames.iter().map(|f| f.len() - 14).collect();
    assert_eq!(ip_sizes, vec![1396, 124], "the router's cut");
    let mut to_int = Vec::new();
    for f in &frames {
        px.inbound(pool.packet(f), 1, &mut to_int);
    }
    px.end_of_burst(1, &mut to_int);
    let forwarded: Vec<Vec<u8>> = to_int.iter().map(|p| p.to_vec()).collect();
    assert_eq!(
        forwarded, frames,
        "both fragments forwarded inside, untouched"
    );
    let mut replies = Vec::new();
    px.take_replies(&mut replies);
    assert_eq!(replies.len(), 1, "one report");
    let (sport, dport, payload, _, df) = udp_of(&replies[0].to_vec());
    assert_eq!((sport, dport, df), (fpmtud::DEFAULT_PORT, 40000, true));
    let report = fpmtud::wire::Report::parse(&payload).unwrap();
    assert_eq!((report.nonce, report.sizes), (0xbeef, vec![1396, 124]));
    let s = px.report().pmtud;
    assert_eq!((s.answered, s.fragments_in), (1, 2));
}
