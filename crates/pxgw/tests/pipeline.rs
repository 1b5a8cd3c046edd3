//! The gateway's per-packet logic on heap buffers: MSS rewriting (with no option, a tiny one, one
//! above the iMTU), translation only after a seen handshake, splitting to the PMTU hint,
//! caravans both ways, and counted drops.

mod common;

use common::mss_of;

use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder, TcpOptionElement};
use pxgw::pipeline::Pipeline;
use pxio::{HeapBuf, HeapPool, PacketBuf};

const OUTSIDE: [u8; 4] = [192, 0, 2, 1];
const INSIDE: [u8; 4] = [192, 0, 2, 2];

fn pipeline(extra: &str) -> Pipeline<HeapBuf> {
    common::pipeline_with("", extra)
}

/// A TCP frame; `inbound` means outside → inside.
fn tcp(inbound: bool, seq: u32, syn: bool, mss: Option<u16>, payload: &[u8]) -> Vec<u8> {
    let (src, dst, sport, dport) = if inbound {
        (OUTSIDE, INSIDE, 443, 50000)
    } else {
        (INSIDE, OUTSIDE, 50000, 443)
    };
    let mut h = Ipv4Header::new(0, 64, IpNumber::TCP, src, dst).unwrap();
    h.dont_fragment = true;
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ip(IpHeaders::Ipv4(h, Default::default()))
        .tcp(sport, dport, seq, 65000);
    let b = if syn { b.syn() } else { b.ack(1) };
    let b = match mss {
        Some(m) => b
            .options(&[
                TcpOptionElement::MaximumSegmentSize(m),
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
            ])
            .unwrap(),
        None if syn => b,
        None => b
            .options_raw(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2])
            .unwrap(),
    };
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

fn ip_lens(out: &[HeapBuf]) -> Vec<usize> {
    out.iter().map(|p| p.len() - 14).collect()
}

/// Handshake from outside with `mss`, then an 8000 B segment from inside: returns the outbound
/// IP packet sizes and the rewritten SYN.
fn handshake_then_send(mss: Option<u16>) -> (Vec<u8>, Vec<usize>, Pipeline<HeapBuf>) {
    let pool = HeapPool::new(256);
    let mut px = pipeline("");
    let mut out = Vec::new();
    px.inbound(pool.packet(&tcp(true, 100, true, mss, &[])), 1, &mut out);
    px.end_of_burst(1, &mut out);
    assert_eq!(out.len(), 1, "the SYN goes inside at once");
    let syn = out.pop().unwrap().to_vec();
    px.outbound(
        pool.packet(&tcp(false, 7, false, None, &[9u8; 8000])),
        2,
        &mut out,
    );
    (syn, ip_lens(&out), px)
}

#[test]
fn an_outside_mss_is_raised_to_the_imtu_and_becomes_the_pmtu_hint() {
    let (syn, sizes, px) = handshake_then_send(Some(1400));
    assert_eq!(mss_of(&syn), (Some(8960), true), "raised, checksum patched");
    // The peer's MSS 1400 means a 1440 B path: the 8000 B segment leaves as 1440 B packets.
    assert!(sizes.iter().all(|&s| s <= 1440), "{sizes:?}");
    assert_eq!(sizes.len(), 8000usize.div_ceil(1440 - 52));
    assert_eq!(px.report().mss.rewritten, 1);
}

#[test]
fn a_syn_without_mss_is_left_alone_and_the_fallback_pmtu_applies() {
    let (syn, sizes, px) = handshake_then_send(None);
    assert_eq!(mss_of(&syn), (None, true));
    assert_eq!(px.report().mss.without_mss, 1);
    assert!(sizes.iter().all(|&s| s <= 1500), "eMTU fallback: {sizes:?}");
}

#[test]
fn a_small_mss_at_the_floor_is_raised_and_honoured() {
    // The smallest MSS raised by default: 536 (below it, `tests/border.rs`).
    let (syn, sizes, _) = handshake_then_send(Some(536));
    assert_eq!(mss_of(&syn), (Some(8960), true));
    assert!(sizes.iter().all(|&s| s <= 576), "536 + 40: {sizes:?}");
    assert_eq!(sizes.len(), 8000usize.div_ceil(576 - 52));
}

#[test]
fn an_mss_above_the_imtu_is_lowered_and_the_path_capped_at_the_emtu() {
    let (syn, sizes, _) = handshake_then_send(Some(65000));
    assert_eq!(mss_of(&syn), (Some(8960), true));
    assert!(sizes.iter().all(|&s| s <= 1500), "{sizes:?}");
}

#[test]
fn an_inside_syn_is_clamped_to_the_emtu() {
    let pool = HeapPool::new(256);
    let mut px = pipeline("");
    let mut out = Vec::new();
    px.outbound(
        pool.packet(&tcp(false, 1, true, Some(8960), &[])),
        1,
        &mut out,
    );
    assert_eq!(mss_of(&out[0].to_vec()), (Some(1460), true));
}

#[test]
fn merging_needs_a_seen_handshake() {
    let pool = HeapPool::new(256);
    let mut px = pipeline("[merge]\ndelay = false\n");
    let mut out = Vec::new();
    let data = |i: u32| pool.packet(&tcp(true, 1000 + i * 1448, false, None, &[i as u8; 1448]));
    // No handshake seen: forwarded untranslated, one by one.
    for i in 0..6 {
        px.inbound(data(i), 1, &mut out);
    }
    px.end_of_burst(1, &mut out);
    assert_eq!(ip_lens(&out), vec![1500; 6]);
    out.clear();
    // After the handshake: merged. The SYN from outside, the inside host's SYN-ACK (ISN 0), and
    // data from outside acknowledging it (ack 1) complete it.
    px.inbound(
        pool.packet(&tcp(true, 999, true, Some(1460), &[])),
        2,
        &mut out,
    );
    let mut to_ext = Vec::new();
    px.outbound(pool.packet(&syn_ack(0, 1000)), 2, &mut to_ext);
    assert_eq!(to_ext.len(), 1);
    for i in 0..6 {
        px.inbound(data(i), 2, &mut out);
    }
    px.end_of_burst(2, &mut out);
    assert_eq!(
        ip_lens(&out),
        vec![48, 52 + 6 * 1448],
        "SYN, then one merged packet"
    );
}

/// The inside host's SYN-ACK with sequence number `seq`, acknowledging `ack`.
fn syn_ack(seq: u32, ack: u32) -> Vec<u8> {
    let mut h = Ipv4Header::new(0, 64, IpNumber::TCP, INSIDE, OUTSIDE).unwrap();
    h.dont_fragment = true;
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        .ip(IpHeaders::Ipv4(h, Default::default()))
        .tcp(50000, 443, seq, 65000)
        .syn()
        .ack(ack)
        .options(&[
            TcpOptionElement::MaximumSegmentSize(8960),
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
        ])
        .unwrap()
        .write(&mut v, &[])
        .unwrap();
    v
}

fn udp(dport: u16, dscp: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(OUTSIDE, INSIDE, 64)
        .udp(5000, dport)
        .write(&mut v, payload)
        .unwrap();
    v[15] = dscp << 2;
    let mut h = etherparse::Ipv4HeaderSlice::from_slice(&v[14..])
        .unwrap()
        .to_header();
    h.header_checksum = h.calc_header_checksum();
    v[24..26].copy_from_slice(&h.header_checksum.to_be_bytes());
    v
}

#[test]
fn udp_becomes_caravans_inbound_and_datagrams_outbound() {
    let pool = HeapPool::new(256);
    let mut px = pipeline("");
    let mut to_int = Vec::new();
    let sizes = [1usize, 100, 1472, 700, 0];
    for (i, &n) in sizes.iter().enumerate() {
        px.inbound(
            pool.packet(&udp(7000, 0, &vec![i as u8; n])),
            10,
            &mut to_int,
        );
    }
    // An excluded port (DNS) passes at once, its caravan mark removed.
    px.inbound(pool.packet(&udp(53, 7, b"query")), 10, &mut to_int);
    px.end_of_burst(10, &mut to_int);
    assert_eq!(to_int.len(), 1);
    assert_eq!(to_int[0].to_vec()[15] >> 2, 0, "re-marked");
    px.poll(10 + 50_000, &mut to_int);
    assert_eq!(to_int.len(), 2, "the caravan leaves after its timeout");
    let caravan = to_int.pop().unwrap();
    let caravan_bytes = caravan.to_vec();
    assert_eq!(caravan_bytes[15] >> 2, 7);
    assert_eq!(&caravan_bytes[42..46], b"PXCV", "the caravan header");
    assert_eq!(px.report().caravan.datagrams_packed, 5);
    // Back outside: unpacked into the five datagrams, byte for byte past the IP header.
    let mut to_ext = Vec::new();
    px.outbound(caravan, 20, &mut to_ext);
    assert_eq!(to_ext.len(), 5);
    for (i, (d, &n)) in to_ext.iter().zip(&sizes).enumerate() {
        let v = d.to_vec();
        assert_eq!(v.len(), 14 + 28 + n);
        assert!(v[42..].iter().all(|&b| b == i as u8));
    }
    // A malformed caravan (its first inner length below 8) and an oversized plain datagram are
    // dropped and counted.
    let mut bad = caravan_bytes.clone();
    bad[50 + 4..50 + 6].copy_from_slice(&3u16.to_be_bytes());
    px.outbound(pool.packet(&bad), 30, &mut to_ext);
    let mut big = udp(7000, 0, &[0u8; 3000]);
    big[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    px.outbound(pool.packet(&big), 30, &mut to_ext);
    let r = px.report();
    assert_eq!((r.drops.caravan_malformed, r.drops.oversize), (1, 1));
    assert_eq!(to_ext.len(), 5);
    drop((to_int, to_ext, px));
    assert_eq!(pool.in_use(), 0);
}

/// A TX burst counted at once gives the counters and frame-size histograms that counting its
/// frames one at a time gives, in both directions.
#[test]
fn a_sent_burst_counts_what_its_frames_do_one_by_one() {
    let lens = [66, 66, 66, 1514, 1514, 9014, 66, 60, 1514];
    let (mut one, mut burst) = (pipeline(""), pipeline(""));
    for inbound in [true, false] {
        for len in lens {
            one.count_sent(inbound, len);
        }
        burst.count_sent_burst(inbound, lens);
    }
    let json = |px: &Pipeline<HeapBuf>| px.report().to_json(1.0, 0, &Default::default());
    let (one, burst) = (json(&one), json(&burst));
    assert_eq!(one, burst);
    for direction in ["inbound", "outbound"] {
        assert_eq!(
            burst[direction]["packets_out"],
            lens.len() as u64,
            "{direction}"
        );
        assert_eq!(burst[direction]["max_frame_out"], 9014, "{direction}");
    }
}
