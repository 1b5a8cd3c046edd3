//! A SYN flood cannot switch merging off: a million spoofed SYNs (distinct 5-tuples, never an ACK)
//! must not fill the 65,536-entry connection table, or every connection opened after them would go
//! unmerged until the entries expired 300 s later. Half-open connections live in their own bounded
//! table, cheap to evict, and only a handshake completed by a sender that saw the inside host's
//! ISN reaches the established table (`pxgw::conn`).

mod common;

use common::{FROM_INSIDE, FROM_OUTSIDE};

use std::time::Instant;

use pxgw::pipeline::Pipeline;
use pxio::wire::{self, tcp_flags, EthernetRepr, IpRepr, Ipv4Repr, TcpRepr};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const SERVER: [u8; 4] = [198, 51, 100, 2];
const CLIENT: [u8; 4] = [198, 19, 255, 1];
/// The MSS option 1460.
const MSS_1460: [u8; 4] = [2, 4, 0x05, 0xb4];
/// Segments of the bulk transfer, and their payload.
const SEGMENTS: u32 = 60;
const MSS: usize = 1448;

fn pipeline() -> Pipeline<HeapBuf> {
    common::pipeline_with("", "[merge]\ndelay = false\n")
}

/// A TCP segment `src:sport` → `dst:dport`.
#[allow(clippy::too_many_arguments)]
fn tcp(
    eth: EthernetRepr,
    (src, sport): ([u8; 4], u16),
    (dst, dport): ([u8; 4], u16),
    seq: u32,
    ack: u32,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let ip = IpRepr::V4(Ipv4Repr {
        dont_frag: true,
        ..Ipv4Repr::new(src, dst)
    });
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

/// A real connection from outside: handshake, then a bulk transfer of [`SEGMENTS`] MSS-sized
/// segments in one burst. Returns the IP lengths of the data packets that went inside.
fn handshake_and_bulk(px: &mut Pipeline<HeapBuf>, now: u64) -> Vec<usize> {
    let pool = HeapPool::new(256);
    let (client, server) = ((CLIENT, 40000), (SERVER, 80));
    let mut out = Vec::new();
    let syn = tcp(
        FROM_OUTSIDE,
        client,
        server,
        1000,
        0,
        tcp_flags::SYN,
        &MSS_1460,
        &[],
    );
    px.inbound(pool.packet(&syn), now, &mut out);
    let syn_ack = tcp(
        FROM_INSIDE,
        server,
        client,
        5000,
        1001,
        tcp_flags::SYN | tcp_flags::ACK,
        &MSS_1460,
        &[],
    );
    let mut to_ext = Vec::new();
    px.outbound(pool.packet(&syn_ack), now + 1_000, &mut to_ext);
    assert_eq!(to_ext.len(), 1, "the SYN-ACK goes out");
    let ack = tcp(
        FROM_OUTSIDE,
        client,
        server,
        1001,
        5001,
        tcp_flags::ACK,
        &[],
        &[],
    );
    px.inbound(pool.packet(&ack), now + 2_000, &mut out);
    px.end_of_burst(now + 2_000, &mut out);
    out.clear();
    let t = now + 3_000;
    for i in 0..SEGMENTS {
        let payload = vec![i as u8; MSS];
        let seg = tcp(
            FROM_OUTSIDE,
            client,
            server,
            1001 + i * MSS as u32,
            5001,
            tcp_flags::ACK,
            &[],
            &payload,
        );
        px.inbound(pool.packet(&seg), t, &mut out);
    }
    px.end_of_burst(t, &mut out);
    px.flush(t, &mut out);
    let sizes = out.iter().map(|p| p.len() - 14).collect();
    drop((out, to_ext));
    assert_eq!(pool.in_use(), 0);
    sizes
}

#[test]
fn a_million_spoofed_syns_do_not_switch_merging_off() {
    // The normal yield: the same transfer through a fresh gateway.
    let normal = handshake_and_bulk(&mut pipeline(), 0);
    // 60 × 1448 B of payload: nine packets cut at the 9000 B iMTU, and the rest.
    assert!(
        normal.iter().filter(|&&s| s == 9000).count() == 9,
        "{normal:?}"
    );

    let mut px = pipeline();
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    let started = Instant::now();
    let mut frame = tcp(
        FROM_OUTSIDE,
        ([198, 18, 0, 0], 1024),
        (SERVER, 80),
        7,
        0,
        tcp_flags::SYN,
        &MSS_1460,
        &[],
    );
    // 1 M distinct spoofed sources (198.18.0.0/16 × 16 ports), one SYN each, 1 µs apart.
    for i in 0..1_000_000u32 {
        let (addr, port) = (i & 0xffff, 1024 + (i >> 16) as u16);
        frame[28..30].copy_from_slice(&(addr as u16).to_be_bytes());
        frame[34..36].copy_from_slice(&port.to_be_bytes());
        px.inbound(pool.packet(&frame), u64::from(i) * 1_000, &mut out);
        if out.len() >= 1024 {
            px.end_of_burst(u64::from(i) * 1_000, &mut out);
            out.clear();
        }
    }
    px.end_of_burst(1_000_000_000, &mut out);
    out.clear();
    eprintln!("1 M spoofed SYNs in {:?}", started.elapsed());
    let r = px.report();
    assert_eq!(r.mss.handshakes, 1_000_000);

    // A new connection a second later, long before anything would expire.
    let after = handshake_and_bulk(&mut px, 1_001_000_000);
    assert_eq!(after, normal, "merged exactly as without the flood");
    let r = px.report();
    assert!(
        r.merge.conversion_yield > 0.8,
        "yield {:.3}",
        r.merge.conversion_yield
    );
    assert!(
        r.connections <= 2,
        "spoofed SYNs never become connections: {}",
        r.connections
    );
    drop(out);
    assert_eq!(pool.in_use(), 0);
}
