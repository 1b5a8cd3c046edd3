//! After a restart, connections that survive are merged again: the gateway never saw their
//! handshake, so it learns them from the data (`pxgw::conn`, "Learning"): a run of in-order
//! MSS-sized segments from outside with a consistent ACK stream, which the inside host
//! acknowledges, makes the connection known, with the observed segment size as its path MTU hint.
//! The simulation measures the yield a restarted gateway recovers.

mod common;

use common::{FROM_INSIDE, FROM_OUTSIDE};

use pxgw::pipeline::Pipeline;
use pxio::wire::{self, tcp_flags, IpRepr, Ipv4Repr, TcpRepr};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const SERVER: [u8; 4] = [198, 51, 100, 2];
const MSS: usize = 1448;
/// IP bytes of one segment (no TCP options).
const SEGMENT: usize = MSS + 40;
const IMTU: usize = 9000;
/// IP bytes of an "iMTU-bound" packet, as the yield counts it (≥ 8948 B).
const FULL: usize = IMTU - 52;

fn pipeline(extra: &str) -> Pipeline<HeapBuf> {
    common::pipeline_with("", extra)
}

/// A connection from outside client `n` (port 40000 + n) to the inside server, port 80.
#[derive(Clone, Copy, Debug)]
struct Conn {
    client: [u8; 4],
    port: u16,
    /// Next sequence number the client sends.
    seq: u32,
    /// The server's sequence number (the client's ACK).
    server_seq: u32,
}

impl Conn {
    fn new(n: u16) -> Self {
        Self {
            client: [198, 18, (n >> 8) as u8, n as u8],
            port: 40000 + n,
            // Mid-connection: far from any ISN, and across the sequence-space wrap for some.
            seq: 0xffff_0000u32.wrapping_add(u32::from(n) * 7_777_777),
            server_seq: 5_000_000 + u32::from(n),
        }
    }

    fn frame(&self, inbound: bool, flags: u8, payload: &[u8]) -> Vec<u8> {
        let (eth, src, dst, sport, dport, seq, ack) = if inbound {
            let c = (
                self.client,
                SERVER,
                self.port,
                80,
                self.seq,
                self.server_seq,
            );
            (FROM_OUTSIDE, c.0, c.1, c.2, c.3, c.4, c.5)
        } else {
            let c = (
                SERVER,
                self.client,
                80,
                self.port,
                self.server_seq,
                self.seq,
            );
            (FROM_INSIDE, c.0, c.1, c.2, c.3, c.4, c.5)
        };
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
            options: &[],
        };
        wire::tcp_frame(eth, ip, tcp, payload).unwrap()
    }

    /// The client's next MSS-sized data segment.
    fn data(&mut self) -> Vec<u8> {
        let payload: Vec<u8> = (0..MSS).map(|i| (self.seq as usize + i) as u8).collect();
        let f = self.frame(true, tcp_flags::ACK, &payload);
        self.seq = self.seq.wrapping_add(MSS as u32);
        f
    }

    /// The server's ACK of everything received.
    fn ack(&self) -> Vec<u8> {
        self.frame(false, tcp_flags::ACK, &[])
    }

    /// The handshake the gateway sees when it was running all along.
    fn handshake(&mut self, px: &mut Pipeline<HeapBuf>, pool: &HeapPool) {
        let mut sink = Vec::new();
        self.seq = self.seq.wrapping_sub(1);
        self.server_seq = self.server_seq.wrapping_sub(1);
        let syn = self.frame(true, tcp_flags::SYN, &[]);
        px.inbound(pool.packet(&syn), 0, &mut sink);
        self.seq = self.seq.wrapping_add(1);
        let syn_ack = self.frame(false, tcp_flags::SYN | tcp_flags::ACK, &[]);
        px.outbound(pool.packet(&syn_ack), 0, &mut sink);
        self.server_seq = self.server_seq.wrapping_add(1);
        let ack = self.frame(true, tcp_flags::ACK, &[]);
        px.inbound(pool.packet(&ack), 0, &mut sink);
        px.end_of_burst(0, &mut sink);
    }
}

/// Payload bytes that went inside, and those in iMTU-bound packets.
#[derive(Clone, Copy, Debug, Default)]
struct Yield {
    payload: usize,
    full: usize,
}

impl Yield {
    fn count(&mut self, frames: &[HeapBuf]) {
        for f in frames {
            let ip_len = f.len() - 14;
            let payload = ip_len.saturating_sub(40);
            self.payload += payload;
            if ip_len >= FULL {
                self.full += payload;
            }
        }
    }

    fn ratio(&self) -> f64 {
        self.full as f64 / self.payload.max(1) as f64
    }
}

/// `flows` connections send `segments` each, round-robin, in RX bursts of 32; after every burst
/// the server acknowledges what each connection got. Returns the yield and the packet sizes of
/// the first connection, in order.
fn transfer(px: &mut Pipeline<HeapBuf>, conns: &mut [Conn], segments: usize) -> Yield {
    let pool = HeapPool::new(256);
    let (mut y, mut out, mut to_ext) = (Yield::default(), Vec::new(), Vec::new());
    let mut now = 1_000_000u64;
    let total = conns.len() * segments;
    let mut sent = 0;
    while sent < total {
        for _ in 0..32.min(total - sent) {
            let c = &mut conns[sent % conns.len()];
            px.inbound(pool.packet(&c.data()), now, &mut out);
            sent += 1;
        }
        px.end_of_burst(now, &mut out);
        for c in conns.iter() {
            px.outbound(pool.packet(&c.ack()), now, &mut to_ext);
        }
        y.count(&out);
        out.clear();
        to_ext.clear();
        // 2 µs per burst of 32: each connection at about 12 Gb/s.
        now += 2_000;
    }
    px.flush(now, &mut out);
    y.count(&out);
    drop(out);
    assert_eq!(pool.in_use(), 0, "nothing leaked");
    y
}

/// One connection whose handshake the gateway never saw: its first segments pass as they came,
/// then, once learned, its segments are merged to the iMTU.
#[test]
fn a_connection_seen_only_mid_stream_is_merged_after_learning() {
    let mut px = pipeline("[merge]\ndelay = false\n");
    let pool = HeapPool::new(256);
    let mut c = Conn::new(1);
    let mut sizes = Vec::new();
    for _burst in 0..10 {
        let mut out = Vec::new();
        for _ in 0..12 {
            px.inbound(pool.packet(&c.data()), 1_000, &mut out);
        }
        px.end_of_burst(1_000, &mut out);
        sizes.extend(out.iter().map(|p| p.len() - 14));
        drop(out);
        let mut to_ext = Vec::new();
        px.outbound(pool.packet(&c.ack()), 1_000, &mut to_ext);
        assert_eq!(to_ext.len(), 1, "the server's ACK goes out");
    }
    // The first burst teaches the gateway the run, the server's ACK confirms it: from the second
    // burst on, every 12 segments leave as two packets (9000 B, then the rest of the burst).
    assert_eq!(sizes[..12], [SEGMENT; 12], "before: as they came");
    assert!(
        sizes[12..].chunks(2).all(|p| p[0] == IMTU),
        "after: merged to the iMTU: {:?}",
        &sizes[12..]
    );
    assert_eq!(sizes.len(), 12 + 9 * 2);
    let r = px.report();
    assert_eq!(r.connections, 1);
    assert_eq!(r.mss.learned, 1);
}

/// Spoofed data from outside that the inside host never acknowledges is never learned.
#[test]
fn unacknowledged_data_is_never_learned() {
    let mut px = pipeline("[merge]\ndelay = false\n");
    let pool = HeapPool::new(256);
    let mut c = Conn::new(2);
    let mut out = Vec::new();
    for _ in 0..100 {
        px.inbound(pool.packet(&c.data()), 1_000, &mut out);
        px.end_of_burst(1_000, &mut out);
    }
    assert!(out.iter().all(|p| p.len() == 14 + SEGMENT), "never merged");
    // An ACK from inside for data it never got (beyond what was sent) proves nothing either.
    let mut lie = c;
    lie.seq = lie.seq.wrapping_add(1_000_000);
    let mut to_ext = Vec::new();
    px.outbound(pool.packet(&lie.ack()), 1_000, &mut to_ext);
    out.clear();
    for _ in 0..12 {
        px.inbound(pool.packet(&c.data()), 1_000, &mut out);
    }
    px.end_of_burst(1_000, &mut out);
    assert!(out.iter().all(|p| p.len() == 14 + SEGMENT), "never merged");
    assert_eq!(px.report().connections, 0);
}

/// The figure that matters: the yield a restarted gateway recovers, against the same traffic
/// through a gateway that saw every handshake (default adaptive delay). Bulk transfers of 400
/// segments, 4 and 16 connections interleaved in RX bursts of 32 (8 and 2 segments of each
/// connection per burst).
#[test]
fn a_restarted_gateway_recovers_its_yield() {
    const SEGMENTS: usize = 400;
    for flows in [4u16, 16] {
        let pool = HeapPool::new(256);
        let mut conns: Vec<Conn> = (0..flows).map(Conn::new).collect();
        let mut normal_px = pipeline("");
        for c in &mut conns {
            c.handshake(&mut normal_px, &pool);
        }
        let normal = transfer(&mut normal_px, &mut conns, SEGMENTS);

        // The same connections, mid-stream, through a gateway that just started.
        let mut restarted_px = pipeline("");
        let restarted = transfer(&mut restarted_px, &mut conns, SEGMENTS);
        eprintln!(
            "{flows} connections x {SEGMENTS} segments: yield (payload in packets of at least \
             {FULL} B IP) {:.1} % with every handshake seen, {:.1} % after a restart ({} \
             connections learned)",
            100.0 * normal.ratio(),
            100.0 * restarted.ratio(),
            restarted_px.report().mss.learned
        );
        assert_eq!(restarted_px.report().connections, u64::from(flows));
        assert!(
            restarted.ratio() >= normal.ratio() - 0.05,
            "{flows} flows: restarted {:.3} vs normal {:.3}",
            restarted.ratio(),
            normal.ratio()
        );
        if flows == 4 {
            assert!(normal.ratio() > 0.9, "normal yield {:.3}", normal.ratio());
        }
    }
}
