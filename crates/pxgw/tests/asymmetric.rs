//! Two pxgw instances behind ECMP, each direction of a connection crossing a different one
//! (docs/scale-out.md, "Asymmetric paths"). Instance A sees everything the outside peer sends,
//! instance B everything the inside host sends; neither sees the whole handshake. What each one
//! must still do on its own:
//!
//! - MSS rewrite: A raises the outside's SYN to the iMTU's MSS, B clamps the inside host's
//!   SYN-ACK to the eMTU's without having seen the SYN.
//! - merge: A merges the outside's data once it learned the connection one way
//!   (`[connections] one_way`), with every byte intact and in order;
//! - split: B cuts the inside host's iMTU-sized segments to the eMTU, having never seen the
//!   outside's MSS.
//!
//! Each case runs in IPv4 and IPv6; with one-way learning off, A never merges (the control).

mod common;

use common::{FROM_INSIDE, FROM_OUTSIDE};

use pxgw::pipeline::Pipeline;
use pxio::wire::{self, tcp_flags, IpRepr, Ipv4Repr, Ipv6Repr, TcpRepr};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const IMTU: usize = 9000;
const EMTU: usize = 1500;

/// One TCP connection from an outside client to an inside server, in either family.
struct Conn {
    v6: bool,
    /// The client's next sequence number.
    client_seq: u32,
    /// The server's next sequence number.
    server_seq: u32,
}

impl Conn {
    fn ip_header(&self) -> usize {
        if self.v6 {
            40
        } else {
            20
        }
    }

    fn frame(&self, inbound: bool, flags: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
        let (client4, server4) = ([198, 18, 0, 2], [198, 19, 100, 2]);
        let mut client6 = [0u8; 16];
        client6[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        client6[15] = 2;
        let mut server6 = client6;
        server6[5] = 0x64;
        let (eth, sport, dport, seq, ack) = if inbound {
            (FROM_OUTSIDE, 40000, 80, self.client_seq, self.server_seq)
        } else {
            (FROM_INSIDE, 80, 40000, self.server_seq, self.client_seq)
        };
        let ip = match (self.v6, inbound) {
            (false, true) => IpRepr::V4(Ipv4Repr {
                dont_frag: true,
                ..Ipv4Repr::new(client4, server4)
            }),
            (false, false) => IpRepr::V4(Ipv4Repr {
                dont_frag: true,
                ..Ipv4Repr::new(server4, client4)
            }),
            (true, true) => IpRepr::V6(Ipv6Repr::new(client6, server6)),
            (true, false) => IpRepr::V6(Ipv6Repr::new(server6, client6)),
        };
        let tcp = TcpRepr {
            src_port: sport,
            dst_port: dport,
            seq,
            ack,
            flags,
            window: 65000,
            urgent: 0,
            options,
        };
        wire::tcp_frame(eth, ip, tcp, payload).unwrap()
    }
}

/// The MSS option of a SYN or SYN-ACK frame.
fn mss_of(frame: &[u8]) -> Option<u16> {
    let wire::Class::Tcp(h) = wire::classify(frame, frame.len()) else {
        panic!("not TCP");
    };
    wire::TcpPacket::new_checked(&frame[h.l4_offset()..h.hdr_len()])
        .ok()?
        .mss()
}

/// TCP payload of each frame, with its IP length.
fn payloads(frames: &[HeapBuf]) -> Vec<(usize, Vec<u8>)> {
    frames
        .iter()
        .map(|f| {
            let bytes = f.to_vec();
            let wire::Class::Tcp(h) = wire::classify(&bytes, bytes.len()) else {
                panic!("not TCP");
            };
            (
                usize::from(h.ip_len),
                bytes[h.hdr_len()..h.frame_len()].to_vec(),
            )
        })
        .collect()
}

fn instance(one_way: bool) -> Pipeline<HeapBuf> {
    common::pipeline_with("", &format!("[connections]\none_way = {one_way}\n"))
}

/// What the asymmetric connection showed.
struct Seen {
    /// Share of the inbound payload in packets within one outside segment of the iMTU.
    inbound_yield: f64,
    /// Connections A learned one way.
    learned_one_way: u64,
}

/// The handshake, 400 MSS-sized segments from outside in bursts of 32 through A (the server's
/// ACKs through B), then 40 iMTU-sized segments from inside through B (the client's ACKs
/// through A). Asserts the MSS rewrites, and that every byte arrives once, in order, within
/// each side's MTU.
fn asymmetric(v6: bool, one_way: bool) -> Seen {
    let (mut a, mut b) = (instance(one_way), instance(one_way));
    let pool = HeapPool::new(512);
    let mut c = Conn {
        v6,
        client_seq: 0xffff_f000, // across the sequence-space wrap
        server_seq: 7_000_000,
    };
    let overhead = c.ip_header() + 20;
    let mut out = Vec::new();
    // The handshake, split across the instances.
    let syn = c.frame(true, tcp_flags::SYN, &mss_option(1460), &[]);
    a.inbound(pool.packet(&syn), 0, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        mss_of(&out[0].to_vec()),
        Some((IMTU - overhead) as u16),
        "A raised the outside's MSS to the iMTU's"
    );
    out.clear();
    c.client_seq = c.client_seq.wrapping_add(1);
    let syn_ack = c.frame(
        false,
        tcp_flags::SYN | tcp_flags::ACK,
        &mss_option((IMTU - overhead) as u16),
        &[],
    );
    b.outbound(pool.packet(&syn_ack), 0, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(
        mss_of(&out[0].to_vec()),
        Some((EMTU - overhead) as u16),
        "B clamped the inside host's MSS to the eMTU's without having seen the SYN"
    );
    out.clear();
    c.server_seq = c.server_seq.wrapping_add(1);
    a.inbound(
        pool.packet(&c.frame(true, tcp_flags::ACK, &[], &[])),
        0,
        &mut out,
    );
    out.clear();

    // The outside sends; A merges; the server's ACKs cross B.
    let mss = EMTU - overhead;
    let mut sent = Vec::new();
    let mut inside = Vec::new();
    let mut now = 1_000_000u64;
    for burst in 0..400 / 32 + 1 {
        for i in 0..32.min(400 - burst * 32) {
            let payload: Vec<u8> = (0..mss).map(|j| (burst * 131 + i * 7 + j) as u8).collect();
            let f = c.frame(true, tcp_flags::ACK, &[], &payload);
            sent.extend_from_slice(&payload);
            c.client_seq = c.client_seq.wrapping_add(mss as u32);
            a.inbound(pool.packet(&f), now, &mut out);
        }
        a.end_of_burst(now, &mut out);
        inside.extend(payloads(&out));
        out.clear();
        let ack = c.frame(false, tcp_flags::ACK, &[], &[]);
        b.outbound(pool.packet(&ack), now, &mut out);
        assert_eq!(out.len(), 1, "the server's ACK goes out through B");
        out.clear();
        now += 20_000;
    }
    a.flush(now, &mut out);
    inside.extend(payloads(&out));
    out.clear();
    assert!(inside.iter().all(|(ip_len, _)| *ip_len <= IMTU));
    let got: Vec<u8> = inside.iter().flat_map(|(_, p)| p.clone()).collect();
    assert!(got == sent, "every inbound byte once, in order");
    let bound: usize = inside
        .iter()
        .filter(|(ip_len, _)| ip_len + mss > IMTU)
        .map(|(_, p)| p.len())
        .sum();

    // The server sends iMTU-sized segments (the MSS A wrote); B splits; the client's ACKs
    // cross A.
    let big = IMTU - overhead;
    let mut sent = Vec::new();
    let mut outside = Vec::new();
    for i in 0..40 {
        let payload: Vec<u8> = (0..big).map(|j| (i * 3 + j / 5) as u8).collect();
        let f = c.frame(false, tcp_flags::ACK, &[], &payload);
        sent.extend_from_slice(&payload);
        c.server_seq = c.server_seq.wrapping_add(big as u32);
        b.outbound(pool.packet(&f), now, &mut out);
        outside.extend(payloads(&out));
        out.clear();
        a.inbound(
            pool.packet(&c.frame(true, tcp_flags::ACK, &[], &[])),
            now,
            &mut out,
        );
        a.end_of_burst(now, &mut out);
        assert_eq!(out.len(), 1, "the client's ACK goes in through A");
        out.clear();
        now += 20_000;
    }
    assert!(
        outside.iter().all(|(ip_len, _)| *ip_len <= EMTU),
        "B split to the eMTU"
    );
    let got: Vec<u8> = outside.iter().flat_map(|(_, p)| p.clone()).collect();
    assert!(got == sent, "every outbound byte once, in order");
    assert_eq!(pool.in_use(), 0, "nothing leaked");
    Seen {
        inbound_yield: bound as f64 / got_len(&inside) as f64,
        learned_one_way: a.report().mss.learned_one_way,
    }
}

fn got_len(frames: &[(usize, Vec<u8>)]) -> usize {
    frames.iter().map(|(_, p)| p.len()).sum()
}

/// A TCP MSS option.
fn mss_option(mss: u16) -> [u8; 4] {
    let [hi, lo] = mss.to_be_bytes();
    [2, 4, hi, lo]
}

#[test]
fn an_asymmetric_connection_is_rewritten_merged_and_split_with_one_way_learning() {
    for v6 in [false, true] {
        let seen = asymmetric(v6, true);
        eprintln!(
            "v6 {v6}: yield {:.1} % with one-way learning",
            100.0 * seen.inbound_yield
        );
        assert_eq!(seen.learned_one_way, 1);
        assert!(
            seen.inbound_yield > 0.9,
            "v6 {v6}: yield {:.3}",
            seen.inbound_yield
        );
    }
}

#[test]
fn without_one_way_learning_the_instance_that_sees_one_direction_never_merges() {
    for v6 in [false, true] {
        let seen = asymmetric(v6, false);
        assert_eq!(seen.learned_one_way, 0);
        assert_eq!(seen.inbound_yield, 0.0, "v6 {v6}: nothing merged");
    }
}

/// After a route change (a failover), an instance that saw only the inside host's SYN (the
/// outside's SYN-ACK crossed the other instance) starts seeing the outside's ACKs, which
/// complete the connection here without the outside's MSS ever being seen: the inside host's
/// segments are still split to the eMTU, not dropped (before the fix the connection's split
/// size was 0, and every segment, ACKs included, was dropped as `split_failed`).
#[test]
fn a_connection_completed_without_the_outside_mss_is_split_to_the_emtu() {
    for v6 in [false, true] {
        let mut b = instance(true);
        let pool = HeapPool::new(64);
        let mut c = Conn {
            v6,
            client_seq: 1_000,
            server_seq: 9_000_000,
        };
        let overhead = c.ip_header() + 20;
        let mut out = Vec::new();
        // The inside host opens the connection through B.
        let syn = c.frame(false, tcp_flags::SYN, &mss_option(8960), &[]);
        b.outbound(pool.packet(&syn), 0, &mut out);
        assert_eq!(mss_of(&out[0].to_vec()), Some((EMTU - overhead) as u16));
        out.clear();
        c.server_seq += 1;
        c.client_seq += 1;
        // The outside's ACKs now come through B.
        let ack = c.frame(true, tcp_flags::ACK, &[], &[]);
        b.inbound(pool.packet(&ack), 1_000, &mut out);
        b.end_of_burst(1_000, &mut out);
        assert_eq!(out.len(), 1);
        out.clear();
        let big = IMTU - overhead;
        let payload: Vec<u8> = (0..big).map(|i| (i / 3) as u8).collect();
        b.outbound(
            pool.packet(&c.frame(false, tcp_flags::ACK, &[], &payload)),
            2_000,
            &mut out,
        );
        let segs = payloads(&out);
        assert!(segs.len() > 1, "v6 {v6}: split, not dropped");
        assert!(segs.iter().all(|(ip_len, _)| *ip_len <= EMTU));
        let got: Vec<u8> = segs.into_iter().flat_map(|(_, p)| p).collect();
        assert!(got == payload, "v6 {v6}: bytes intact");
        assert_eq!(b.report().drops.split_failed, 0);
    }
}

/// An instance that sees only the inside host's IPv6 segments (the outside's SYN-ACK and ACKs
/// cross the other instance) still notices an ICMPv6 black hole: the inside host sending the
/// same split segment again and again makes it fall back to 1280 for that destination.
#[test]
fn an_instance_that_sees_only_the_inside_direction_detects_an_ipv6_black_hole() {
    let mut b = instance(true);
    let pool = HeapPool::new(256);
    let mut c = Conn {
        v6: true,
        client_seq: 1_000,
        server_seq: 9_000_000,
    };
    let mut out = Vec::new();
    b.outbound(
        pool.packet(&c.frame(false, tcp_flags::SYN, &mss_option(8940), &[])),
        0,
        &mut out,
    );
    out.clear();
    c.server_seq += 1;
    c.client_seq += 1;
    let base = c.server_seq;
    let big = IMTU - 60;
    let ms = 1_000_000;
    let mut send = |b: &mut Pipeline<HeapBuf>, k: u32, now: u64| -> Vec<usize> {
        c.server_seq = base.wrapping_add(k * big as u32);
        let payload: Vec<u8> = (0..big).map(|i| (i as u32 + k) as u8).collect();
        let mut out = Vec::new();
        b.outbound(
            pool.packet(&c.frame(false, tcp_flags::ACK, &[], &payload)),
            now,
            &mut out,
        );
        payloads(&out)
            .into_iter()
            .map(|(ip_len, _)| ip_len)
            .collect()
    };
    // A window of three segments, then the whole window again on each timeout.
    for k in 0..3 {
        assert_eq!(send(&mut b, k, 10 * ms)[0], EMTU);
    }
    for k in 0..3 {
        assert_eq!(send(&mut b, k, 300 * ms)[0], EMTU, "first retransmission");
    }
    let lens = send(&mut b, 0, 900 * ms);
    assert!(
        lens.iter().all(|&l| l <= 1280),
        "second retransmission of the head: a black hole: {lens:?}"
    );
    assert_eq!(b.report().router.blackhole_fallbacks, 1);
    assert_eq!(b.report().connections, 0, "never established here");
}
