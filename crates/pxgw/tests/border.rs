//! What an outside host can make the gateway do, tried as an attacker would, with real frames
//! through the pipeline: a tiny MSS must not turn one segment into a thousand frames, a spoofed
//! SYN must not change an established connection's split size, an ICMP error must quote a
//! segment in flight and an MTU above the floor, the caravan mark must not survive any inbound
//! path, and a full connection table must make room instead of refusing.

mod common;

use etherparse::{
    IpHeaders, IpNumber, Ipv4Header, Ipv4HeaderSlice, PacketBuilder, TcpOptionElement,
};
use pxgw::pipeline::Pipeline;
use pxio::{HeapBuf, HeapPool, PacketBuf};

use common::hosts::{INSIDE_V4, INSIDE_V6, OUTSIDE_V4, OUTSIDE_V6};
use common::too_big;

/// The outside peer's port and the inside server's.
const OUTSIDE_PORT: u16 = 40000;
const INSIDE_PORT: u16 = 443;
/// The outside's and the inside's initial sequence numbers.
const OUTSIDE_ISN: u32 = 1_000_000;
const INSIDE_ISN: u32 = 7_000_000;
/// What an inside host behind a 9000 B iMTU sends: one full-sized segment.
const BIG: usize = 8948;

/// One TCP segment of the test connection.
#[derive(Clone, Copy)]
struct Seg {
    v6: bool,
    /// Outside → inside.
    inbound: bool,
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    mss: Option<u16>,
    sport: u16,
}

impl Seg {
    fn new(v6: bool, inbound: bool, seq: u32) -> Self {
        Self {
            v6,
            inbound,
            seq,
            ack: None,
            syn: false,
            mss: None,
            sport: OUTSIDE_PORT,
        }
    }

    fn ack(self, ack: u32) -> Self {
        Self {
            ack: Some(ack),
            ..self
        }
    }

    fn syn(self, mss: u16) -> Self {
        Self {
            syn: true,
            mss: Some(mss),
            ..self
        }
    }

    fn port(self, sport: u16) -> Self {
        Self { sport, ..self }
    }

    fn frame(&self, payload: &[u8]) -> Vec<u8> {
        let (mac_src, mac_dst) = if self.inbound {
            ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        } else {
            ([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
        };
        let eth = PacketBuilder::ethernet2(mac_src, mac_dst);
        let ip = match (self.v6, self.inbound) {
            (false, inbound) => {
                let (src, dst) = if inbound {
                    (OUTSIDE_V4, INSIDE_V4)
                } else {
                    (INSIDE_V4, OUTSIDE_V4)
                };
                let mut h = Ipv4Header::new(0, 64, IpNumber::TCP, src, dst).unwrap();
                h.dont_fragment = true;
                eth.ip(IpHeaders::Ipv4(h, Default::default()))
            }
            (true, true) => eth.ipv6(OUTSIDE_V6, INSIDE_V6, 64),
            (true, false) => eth.ipv6(INSIDE_V6, OUTSIDE_V6, 64),
        };
        let (sport, dport) = if self.inbound {
            (self.sport, INSIDE_PORT)
        } else {
            (INSIDE_PORT, self.sport)
        };
        let mut b = ip.tcp(sport, dport, self.seq, 65000);
        if self.syn {
            b = b.syn();
        }
        if let Some(ack) = self.ack {
            b = b.ack(ack);
        }
        if let Some(m) = self.mss {
            b = b
                .options(&[
                    TcpOptionElement::MaximumSegmentSize(m),
                    TcpOptionElement::Noop,
                    TcpOptionElement::Noop,
                ])
                .unwrap();
        }
        let mut v = Vec::new();
        b.write(&mut v, payload).unwrap();
        v
    }
}

/// A pipeline with `extra` configuration, the pool its frames come from, and the time.
struct Gw {
    px: Pipeline<HeapBuf>,
    pool: HeapPool,
    now: u64,
}

impl Gw {
    fn new(extra: &str) -> Self {
        Self {
            px: common::pipeline_with("", extra),
            pool: HeapPool::new(16384),
            now: 1,
        }
    }

    /// Sends `frame` from outside; returns what went inside.
    fn inbound(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        let pkt = self.pool.packet(frame);
        self.inbound_buf(pkt)
    }

    fn inbound_buf(&mut self, pkt: HeapBuf) -> Vec<Vec<u8>> {
        self.now += 1000;
        let mut out = Vec::new();
        self.px.inbound(pkt, self.now, &mut out);
        self.px.flush(self.now, &mut out);
        out.iter().map(|p| p.to_vec()).collect()
    }

    /// Sends `frame` from inside; returns the IP lengths of what went outside.
    fn outbound(&mut self, frame: &[u8]) -> Vec<usize> {
        self.now += 1000;
        let mut out = Vec::new();
        self.px
            .outbound(self.pool.packet(frame), self.now, &mut out);
        out.iter().map(|p| p.len() - 14).collect()
    }

    /// A handshake from outside announcing `mss`, completed; returns the SYN as it went inside.
    fn handshake(&mut self, v6: bool, mss: u16) -> Vec<u8> {
        let syn = self.inbound(&Seg::new(v6, true, OUTSIDE_ISN).syn(mss).frame(&[]));
        assert_eq!(syn.len(), 1, "the SYN goes inside at once");
        let syn_ack = Seg::new(v6, false, INSIDE_ISN)
            .syn(8960)
            .ack(OUTSIDE_ISN + 1)
            .frame(&[]);
        assert_eq!(self.outbound(&syn_ack).len(), 1);
        let ack = Seg::new(v6, true, OUTSIDE_ISN + 1)
            .ack(INSIDE_ISN + 1)
            .frame(&[]);
        self.inbound(&ack);
        syn.into_iter().next().unwrap()
    }

    /// The inside host sends `n` bytes at `seq` (acknowledging everything from outside);
    /// returns the IP lengths of what went outside.
    fn send(&mut self, v6: bool, seq: u32, n: usize) -> Vec<usize> {
        let data = Seg::new(v6, false, seq)
            .ack(OUTSIDE_ISN + 1)
            .frame(&vec![0x5a; n]);
        self.outbound(&data)
    }
}

use common::mss_of;

// ---- a tiny MSS ----

#[test]
fn an_mss_below_the_floor_is_not_raised_and_nothing_is_split_below_the_floor() {
    for mss in [8u16, 48, 100, 535] {
        let mut gw = Gw::new("");
        let syn = gw.handshake(false, mss);
        assert_eq!(
            mss_of(&syn),
            (Some(mss), true),
            "MSS {mss}: the inside host is told the outside's own MSS, so it segments for itself"
        );
        assert_eq!(gw.px.report().mss.below_floor, 1, "MSS {mss}");
        // Were the inside host to send a large segment anyway, it is cut no finer than the
        // floor's 576 B packets (16 of them), never into thousands of frames.
        let sizes = gw.send(false, INSIDE_ISN + 1, BIG);
        assert!(sizes.iter().all(|&s| s <= 576), "MSS {mss}: {sizes:?}");
        assert_eq!(sizes.len(), BIG.div_ceil(536), "MSS {mss}: {sizes:?}");
        assert_eq!(gw.px.report().drops.split_failed, 0, "MSS {mss}");
    }
}

#[test]
fn the_floor_is_the_operators_to_set_and_holds_for_ipv6() {
    // Down to Linux's own floor, 48 B: an MSS of 100 is then raised and honoured.
    let mut gw = Gw::new("[mss]\nmin = 48\n");
    let syn = gw.handshake(false, 100);
    assert_eq!(mss_of(&syn), (Some(8960), true));
    let sizes = gw.send(false, INSIDE_ISN + 1, 1000);
    assert!(sizes.iter().all(|&s| s <= 140), "{sizes:?}");
    assert_eq!(gw.px.report().mss.below_floor, 0);
    // IPv6: below 1220 B (the 1280 B minimum MTU's) is not raised, and never split below 1280.
    let mut gw = Gw::new("");
    let syn = gw.handshake(true, 1000);
    assert_eq!(mss_of(&syn), (Some(1000), true));
    let sizes = gw.send(true, INSIDE_ISN + 1, BIG);
    assert!(sizes.iter().all(|&s| s <= 1280), "{sizes:?}");
    assert_eq!(sizes.len(), BIG.div_ceil(1220), "{sizes:?}");
    assert_eq!(gw.px.report().mss.below_floor, 1);
    // At the floor, raised as ever.
    let mut gw = Gw::new("");
    assert_eq!(mss_of(&gw.handshake(true, 1220)), (Some(8940), true));
    assert_eq!(gw.px.report().mss.below_floor, 0);
}

#[test]
fn a_floor_outside_what_tcp_allows_is_refused() {
    for bad in [
        "[mss]\nmin = 47\n",
        "[mss]\nmin = 1461\n",
        "[mss]\nmin_v6 = 1441\n",
    ] {
        let cfg = format!(
            "[ports.external]\ndevice = \"net_null0\"\n[ports.internal]\ndevice = \"net_null1\"\n{bad}"
        );
        let err = pxgw::config::Config::parse(&cfg).unwrap_err().to_string();
        assert!(err.contains("mss.min"), "{bad}: {err}");
    }
}

// ---- SYNs on an established connection ----

#[test]
fn a_spoofed_syn_on_an_established_connection_changes_nothing() {
    for v6 in [false, true] {
        let mut gw = Gw::new("");
        gw.handshake(v6, 1400);
        let before = gw.send(v6, INSIDE_ISN + 1, BIG);
        let pmtu = if v6 { 1460 } else { 1440 };
        assert!(before.iter().all(|&s| s <= pmtu), "{before:?}");
        assert_eq!(before.len(), BIG.div_ceil(1400));
        // Any sequence number, a tiny MSS: a SYN and a SYN-ACK with the connection's 4-tuple.
        gw.inbound(&Seg::new(v6, true, 0xdead_beef).syn(100).frame(&[]));
        gw.inbound(&Seg::new(v6, true, 42).syn(100).ack(7).frame(&[]));
        let seq = INSIDE_ISN + 1 + BIG as u32;
        let after = gw.send(v6, seq, BIG);
        assert_eq!(after, before, "v6 {v6}: the split size is the handshake's");
        // The inside host answers such a SYN with a challenge ACK, not a SYN-ACK; a SYN-ACK of
        // its own that acknowledges no SYN seen changes nothing either.
        let stray = Seg::new(v6, false, 5).syn(8960).ack(12345).frame(&[]);
        gw.outbound(&stray);
        assert_eq!(gw.send(v6, seq + BIG as u32, BIG), before);
        assert_eq!(gw.px.report().mss.syn_ignored, 3, "v6 {v6}");
    }
}

#[test]
fn a_new_incarnation_the_inside_host_accepts_takes_its_own_handshake() {
    let mut gw = Gw::new("");
    gw.handshake(false, 1400);
    assert!(gw
        .send(false, INSIDE_ISN + 1, BIG)
        .iter()
        .all(|&s| s <= 1440));
    // The connection ended (TIME-WAIT on the inside host), and the outside peer reuses the
    // 4-tuple with a new SYN and another MSS. The inside host accepts it: its SYN-ACK
    // acknowledges that SYN.
    let isn2 = OUTSIDE_ISN + 5_000_000;
    gw.inbound(&Seg::new(false, true, isn2).syn(1200).frame(&[]));
    let syn_ack = Seg::new(false, false, 9_000_000)
        .syn(8960)
        .ack(isn2 + 1)
        .frame(&[]);
    gw.outbound(&syn_ack);
    gw.inbound(&Seg::new(false, true, isn2 + 1).ack(9_000_001).frame(&[]));
    let sizes = gw.send(false, 9_000_001, BIG);
    assert!(sizes.iter().all(|&s| s <= 1240), "the new MSS: {sizes:?}");
    assert_eq!(sizes.len(), BIG.div_ceil(1200));
    // The SYN waited until the inside host's answer: counted once, as not (yet) accepted.
    assert_eq!(gw.px.report().mss.syn_ignored, 1);
}

#[test]
fn an_inside_host_opening_the_same_four_tuple_again_starts_afresh() {
    let mut gw = Gw::new("");
    gw.handshake(false, 1400);
    // The inside host is the client now (same ports): its SYN ends the old connection here.
    let syn = Seg::new(false, false, 3_000_000).syn(8960).frame(&[]);
    gw.outbound(&syn);
    let syn_ack = Seg::new(false, true, 4_000_000)
        .syn(1000)
        .ack(3_000_001)
        .frame(&[]);
    gw.inbound(&syn_ack);
    let sizes = gw.send(false, 3_000_001, BIG);
    assert!(sizes.iter().all(|&s| s <= 1040), "{sizes:?}");
    assert_eq!(gw.px.report().mss.syn_ignored, 0);
}

// ---- ICMP errors ----

#[test]
fn a_packet_too_big_counts_only_for_a_segment_in_flight_and_an_mtu_above_the_floor() {
    for v6 in [false, true] {
        let mut gw = Gw::new("");
        gw.handshake(v6, 1400);
        let start = INSIDE_ISN + 1;
        let first = gw.send(v6, start, BIG);
        let quote = |seq| Seg::new(v6, false, seq).ack(OUTSIDE_ISN + 1).frame(&[0; 8]);
        let (low, high) = if v6 { (1200, 1300) } else { (500, 1000) };
        // A guess far from what the inside host has in flight: forwarded, not believed.
        let out = gw.inbound(&too_big(&quote(start.wrapping_add(1 << 20)), v6, high));
        assert_eq!(out.len(), 1, "the error still reaches the inside host");
        // A sequence number already acknowledged is not in flight either.
        gw.inbound(
            &Seg::new(v6, true, OUTSIDE_ISN + 1)
                .ack(start + 2896)
                .frame(&[]),
        );
        gw.inbound(&too_big(&quote(start), v6, high));
        // In flight, but an MTU below the floor.
        gw.inbound(&too_big(&quote(start + 2896), v6, low));
        // Quoting a connection nobody opened.
        let stranger = Seg::new(v6, false, start + 2896).port(40001).frame(&[0; 8]);
        gw.inbound(&too_big(&stranger, v6, high));
        let r = gw.px.report();
        assert_eq!(
            (
                r.router.ptb_out_of_window,
                r.router.ptb_below_floor,
                r.router.ptb_unknown,
                r.router.ptb_learned
            ),
            (2, 1, 1, 0),
            "v6 {v6}"
        );
        let next = start + BIG as u32;
        assert_eq!(
            gw.send(v6, next, BIG),
            first,
            "v6 {v6}: the split size is unchanged"
        );
        // The real thing: a segment in flight, a plausible MTU. Believed.
        gw.inbound(&too_big(&quote(next + 1448), v6, high));
        assert_eq!(gw.px.report().router.ptb_learned, 1, "v6 {v6}");
        let sizes = gw.send(v6, next + BIG as u32, BIG);
        assert!(
            sizes.iter().all(|&s| s <= high as usize),
            "v6 {v6}: {sizes:?}"
        );
    }
}

// ---- the caravan mark ----

/// The caravan mark of the default configuration.
const MARK: u8 = pxio::caravan::DEFAULT_DSCP;

/// Sets the DSCP of the IPv4 or IPv6 header at 14 (fixing the IPv4 header checksum).
fn mark(mut frame: Vec<u8>, l3: usize) -> Vec<u8> {
    if frame[l3] >> 4 == 6 {
        let tc = (MARK << 2) | ((frame[l3 + 1] >> 4) & 0b11);
        frame[l3] = 0x60 | (tc >> 4);
        frame[l3 + 1] = (frame[l3 + 1] & 0x0f) | (tc << 4);
        return frame;
    }
    frame[l3 + 1] = (MARK << 2) | (frame[l3 + 1] & 0b11);
    let ihl = usize::from(frame[l3] & 0xf) * 4;
    frame[l3 + 10..l3 + 12].fill(0);
    let h = Ipv4HeaderSlice::from_slice(&frame[l3..l3 + ihl])
        .unwrap()
        .to_header();
    let sum = h.calc_header_checksum();
    frame[l3 + 10..l3 + 12].copy_from_slice(&sum.to_be_bytes());
    frame
}

/// The DSCP of the frame's IP header at `l3`, and whether an IPv4 header checksum verifies.
fn dscp_of(frame: &[u8], l3: usize) -> (u8, bool) {
    if frame[l3] >> 4 == 6 {
        let tc = (frame[l3] << 4) | (frame[l3 + 1] >> 4);
        return (tc >> 2, true);
    }
    let ihl = usize::from(frame[l3] & 0xf) * 4;
    let h = Ipv4HeaderSlice::from_slice(&frame[l3..l3 + ihl]).unwrap();
    (
        frame[l3 + 1] >> 2,
        h.to_header().calc_header_checksum() == h.header_checksum(),
    )
}

fn udp_v4(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(OUTSIDE_V4, INSIDE_V4, 64)
        .udp(5000, dport)
        .write(&mut v, payload)
        .unwrap();
    v
}

/// Inbound frames that wear the caravan mark, one for each way into the gateway, with where
/// their IP header starts.
fn marked_frames() -> Vec<(&'static str, Vec<u8>, usize)> {
    let mut frames = Vec::new();
    frames.push(("UDP", udp_v4(7000, b"a caravan-shaped payload"), 14));
    frames.push(("UDP, excluded port", udp_v4(53, b"query"), 14));
    let mut v6 = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv6(OUTSIDE_V6, INSIDE_V6, 64)
        .udp(5000, 7000)
        .write(&mut v6, b"v6 datagram")
        .unwrap();
    frames.push(("UDP over IPv6", v6, 14));
    let mut tagged = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .single_vlan(etherparse::VlanId::try_new(7).unwrap())
        .ipv4(OUTSIDE_V4, INSIDE_V4, 64)
        .udp(5000, 7000)
        .write(&mut tagged, b"tagged")
        .unwrap();
    frames.push(("UDP behind 802.1Q", tagged, 18));
    // A first fragment (MF set) of a UDP datagram.
    let mut frag = udp_v4(7000, &[1; 64]);
    frag[20] |= 0x20;
    frames.push(("IPv4 fragment", frag, 14));
    // A UDP header whose length runs past the packet: malformed.
    let mut bad = udp_v4(7000, &[2; 32]);
    bad[38..40].copy_from_slice(&500u16.to_be_bytes());
    frames.push(("malformed UDP", bad, 14));
    let mut gre = udp_v4(7000, &[3; 32]);
    gre[23] = 47;
    frames.push(("another IP protocol (GRE)", gre, 14));
    frames.push(("TCP", Seg::new(false, true, 5).ack(9).frame(&[4; 100]), 14));
    // Larger than the iMTU with DF clear: fragmented to the iMTU on the way in.
    let mut oversize = udp_v4(7000, &[5; 9100]);
    oversize[20] &= !0x40;
    frames.push(("oversize IPv4, DF clear", oversize, 14));
    frames
        .into_iter()
        .map(|(what, f, l3)| (what, mark(f, l3), l3))
        .collect()
}

#[test]
fn the_caravan_mark_never_survives_an_inbound_packet_the_gateway_did_not_pack() {
    for caravans in ["[caravan]\nenabled = false\n", ""] {
        let mut gw = Gw::new(caravans);
        let frames = marked_frames();
        for (what, frame, l3) in &frames {
            assert_eq!(dscp_of(frame, *l3), (MARK, true), "{what}: sent marked");
            let out = gw.inbound(frame);
            assert!(!out.is_empty(), "{caravans}{what}: forwarded");
            for f in &out {
                let (dscp, sum_ok) = dscp_of(f, *l3);
                assert_ne!(dscp, MARK, "{caravans}{what}: the mark reached the inside");
                assert!(
                    sum_ok,
                    "{caravans}{what}: the IPv4 header checksum still verifies"
                );
            }
        }
        let r = gw.px.report();
        assert_eq!(r.caravan.mark_cleared, frames.len() as u64, "{caravans}");
        assert_eq!(r.drops.mark_uncleared, 0);
    }
}

#[test]
fn the_mark_is_cleared_when_the_headers_span_buffers_and_never_repairs_a_damaged_header() {
    let mut gw = Gw::new("");
    let frame = mark(udp_v4(7000, &[6; 200]), 14);
    // The IP header's first bytes in the first buffer, the rest in the next ones.
    let pkt = HeapBuf::from_segments(&gw.pool, &[&frame[..30], &frame[30..50], &frame[50..]]);
    let out = gw.inbound_buf(pkt);
    assert_eq!(out.len(), 1);
    assert_eq!(dscp_of(&out[0], 14), (0, true));
    assert_eq!(
        &out[0][26..],
        &frame[26..],
        "nothing past the checksum changed"
    );
    // A header checksum that was wrong stays wrong: the inside host drops it, as it would have.
    let mut damaged = frame.clone();
    damaged[24] ^= 0x40;
    let out = gw.inbound(&damaged);
    assert_eq!(dscp_of(&out[0], 14), (0, false));
    assert_eq!(gw.px.report().caravan.mark_cleared, 2);
}

#[test]
fn a_marked_frame_whose_mark_cannot_be_cleared_is_dropped_and_counted() {
    let mut gw = Gw::new("");
    let frame = mark(udp_v4(7000, &[7; 200]), 14);
    // Shared data (another reference holds it): not the gateway's to write.
    let whole = gw.pool.packet(&frame);
    let shared = whole.share_range(0, frame.len(), &gw.pool).unwrap();
    assert!(gw.inbound_buf(shared).is_empty());
    // A first buffer too short to hold the IPv4 header's checksum.
    let split = HeapBuf::from_segments(&gw.pool, &[&frame[..20], &frame[20..]]);
    assert!(gw.inbound_buf(split).is_empty());
    // The same frames unmarked pass: only the mark costs a drop.
    let plain = udp_v4(7000, &[7; 200]);
    let whole = gw.pool.packet(&plain);
    let shared = whole.share_range(0, plain.len(), &gw.pool).unwrap();
    assert_eq!(gw.inbound_buf(shared).len(), 1);
    let split = HeapBuf::from_segments(&gw.pool, &[&plain[..20], &plain[20..]]);
    assert_eq!(gw.inbound_buf(split).len(), 1);
    let r = gw.px.report();
    assert_eq!((r.drops.mark_uncleared, r.caravan.mark_cleared), (2, 0));
    assert_eq!(r.drops.total(), 2, "every frame sent or counted");
}

// ---- a full connection table ----

/// Sends 6 in-order 1448 B segments of the connection from `sport` from outside; returns the IP
/// lengths of what went inside.
fn burst_from(gw: &mut Gw, sport: u16, seq: u32) -> Vec<usize> {
    gw.now += 1000;
    let mut out = Vec::new();
    for i in 0..6u32 {
        let f = Seg::new(false, true, seq + i * 1448)
            .ack(INSIDE_ISN + 1)
            .port(sport)
            .frame(&[8; 1448]);
        gw.px.inbound(gw.pool.packet(&f), gw.now, &mut out);
    }
    gw.px.flush(gw.now, &mut out);
    out.iter().map(|p| p.len() - 14).collect()
}

fn open_from(gw: &mut Gw, sport: u16) {
    gw.inbound(
        &Seg::new(false, true, OUTSIDE_ISN)
            .syn(1460)
            .port(sport)
            .frame(&[]),
    );
    let syn_ack = Seg::new(false, false, INSIDE_ISN)
        .syn(8960)
        .ack(OUTSIDE_ISN + 1)
        .port(sport)
        .frame(&[]);
    gw.outbound(&syn_ack);
    gw.inbound(
        &Seg::new(false, true, OUTSIDE_ISN + 1)
            .ack(INSIDE_ISN + 1)
            .port(sport)
            .frame(&[]),
    );
}

#[test]
fn a_full_connection_table_makes_room_for_new_connections() {
    let mut gw = Gw::new("[connections]\nmax = 2\n[merge]\ndelay = false\n");
    open_from(&mut gw, 1001);
    open_from(&mut gw, 1002);
    // 1001 stays busy; 1002 goes quiet (a millisecond later: recency is kept to within
    // `PROMOTE_EVERY_NS`, not per packet).
    gw.now += pxgw::conn::PROMOTE_EVERY_NS;
    let merged = vec![40 + 6 * 1448];
    assert_eq!(burst_from(&mut gw, 1001, OUTSIDE_ISN + 1), merged);
    // A third connection (a flood would bring thousands) takes the quiet one's place.
    open_from(&mut gw, 1003);
    assert_eq!(burst_from(&mut gw, 1003, OUTSIDE_ISN + 1), merged, "merged");
    assert_eq!(
        burst_from(&mut gw, 1001, OUTSIDE_ISN + 1 + 6 * 1448),
        merged,
        "the busy connection kept its place"
    );
    assert_eq!(
        burst_from(&mut gw, 1002, OUTSIDE_ISN + 1),
        vec![1488; 6],
        "evicted"
    );
    let r = gw.px.report();
    assert_eq!((r.mss.established_evicted, r.connections), (1, 2));
}
