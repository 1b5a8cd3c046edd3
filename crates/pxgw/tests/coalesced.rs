//! Coalesced TCP (the NIC's LRO, the kernel's GRO on a kernel-backed port) and whole bursts.
//!
//! A TCP packet above the iMTU is a run of segments: inbound it is cut at the iMTU and merged
//! (the paper's Appendix example: LRO packets of 13.5 KB and 7.5 KB leave as 9000 B packets,
//! the rest of the first stashed for the second); outbound it is split to the path MTU. Neither
//! way is it fragmented or answered with ICMP. And a burst handed over whole
//! (`Pipeline::inbound_burst`) gives every flow's bytes in order, intact, whichever of the
//! engine's two ways (fast path with RSS hashes, grouping without) it took.

mod common;

use common::{tcp, INSIDE, INSIDE6, OUTSIDE, OUTSIDE6};

use etherparse::{SlicedPacket, TransportSlice};
use pxgw::pipeline::Pipeline;
use pxio::wire;
use pxio::{HeapBuf, HeapPool, PacketBuf};

const IMTU: usize = 9000;
/// The outside peer's first sequence number (its SYN's).
const ISS_OUT: u32 = 1000;
/// The inside host's.
const ISS_IN: u32 = 5000;

fn pattern(n: usize, salt: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251 + salt) as u8).collect()
}

/// Establishes the connection of `port` through the pipeline: SYN from outside, SYN-ACK from
/// inside, ACK from outside.
fn handshake(px: &mut Pipeline<HeapBuf>, pool: &HeapPool, v6: bool, port: u16) {
    handshake_at(px, pool, v6, port, 1);
}

/// [`handshake`] from time `t` (ns): its three packets at `t`, `t + 1` and `t + 2`.
fn handshake_at(px: &mut Pipeline<HeapBuf>, pool: &HeapPool, v6: bool, port: u16, t: u64) {
    use wire::tcp_flags::{ACK, SYN};
    let mut out = Vec::new();
    px.inbound_burst(
        [pool.packet(&tcp(v6, true, port, ISS_OUT - 1, 0, SYN, &[]))],
        t,
        &mut out,
    );
    px.outbound_burst(
        [pool.packet(&tcp(v6, false, port, ISS_IN - 1, ISS_OUT, SYN | ACK, &[]))],
        t + 1,
        &mut out,
    );
    px.inbound_burst(
        [pool.packet(&tcp(v6, true, port, ISS_OUT, ISS_IN, ACK, &[]))],
        t + 2,
        &mut out,
    );
    assert_eq!(out.len(), 3, "the handshake crosses");
}

/// `frame` as a NIC hands it up: an RSS hash that follows `port`, both checksums vouched for.
fn from_nic(pool: &HeapPool, frame: &[u8], port: u16) -> HeapBuf {
    let mut b = pool.packet(frame);
    b.set_rss_hash(Some(u32::from(port).wrapping_mul(0x9e37_79b9)));
    b.set_ip_csum_verdict(Some(true));
    b.set_l4_csum_verdict(Some(true));
    b
}

/// The segments of the connection of `port` among `frames` (checked as [`streams`] checks
/// them): each one's offset in the outside's stream and its payload length.
fn segments_of(frames: &[Vec<u8>], port: u16) -> Vec<(u32, usize)> {
    streams(frames, IMTU)
        .remove(&port)
        .unwrap_or_default()
        .into_iter()
        .map(|(seq, data)| (seq.wrapping_sub(ISS_OUT), data.len()))
        .collect()
}

/// What left: per connection port, the payload bytes by sequence number, after checking every
/// frame is a well-formed TCP segment with a valid checksum that fits `mtu`.
fn streams(frames: &[Vec<u8>], mtu: usize) -> std::collections::BTreeMap<u16, Vec<(u32, Vec<u8>)>> {
    let mut by_port = std::collections::BTreeMap::<u16, Vec<(u32, Vec<u8>)>>::new();
    for f in frames {
        assert!(
            f.len() - 14 <= mtu,
            "{} B above the MTU {mtu}",
            f.len() - 14
        );
        let p = SlicedPacket::from_ethernet(f).expect("well formed");
        let Some(TransportSlice::Tcp(t)) = &p.transport else {
            panic!("not TCP")
        };
        let sum_ok = match &p.net {
            Some(etherparse::NetSlice::Ipv4(ip)) => {
                let h = ip.header().to_header();
                assert_eq!(h.header_checksum, h.calc_header_checksum(), "IPv4 checksum");
                t.calc_checksum_ipv4(h.source, h.destination).unwrap() == t.checksum()
            }
            Some(etherparse::NetSlice::Ipv6(ip)) => {
                let h = ip.header().to_header();
                t.calc_checksum_ipv6(h.source, h.destination).unwrap() == t.checksum()
            }
            _ => panic!("not IP"),
        };
        assert!(sum_ok, "TCP checksum of a {} B segment", t.payload().len());
        // The connection's port: the one that is not the inside server's 80.
        let port = if t.source_port() == 80 {
            t.destination_port()
        } else {
            t.source_port()
        };
        if !t.payload().is_empty() {
            by_port
                .entry(port)
                .or_default()
                .push((t.sequence_number(), t.payload().to_vec()));
        }
    }
    by_port
}

/// The bytes of `segments` in sequence order, checking they follow each other exactly.
fn joined(mut segments: Vec<(u32, Vec<u8>)>, first: u32) -> Vec<u8> {
    segments.sort_by_key(|(seq, _)| seq.wrapping_sub(first));
    let mut data = Vec::new();
    for (seq, bytes) in segments {
        assert_eq!(
            seq.wrapping_sub(first) as usize,
            data.len(),
            "no gap, no overlap"
        );
        data.extend_from_slice(&bytes);
    }
    data
}

fn drain(px: &mut Pipeline<HeapBuf>, out: Vec<HeapBuf>, now: u64) -> Vec<Vec<u8>> {
    let mut out = out;
    px.flush(now, &mut out);
    out.iter().map(PacketBuf::to_vec).collect()
}

#[test]
fn lro_packets_of_an_established_connection_are_cut_at_the_imtu_and_merged() {
    for v6 in [false, true] {
        let pool = HeapPool::new(1024);
        let mut px = common::pipeline_with("", "");
        handshake(&mut px, &pool, v6, 40000);
        // The paper's Appendix example: 13.5 KB then 7.5 KB, one LRO packet each.
        let data = pattern(13_500 + 7_500, 3);
        let first = tcp(
            v6,
            true,
            40000,
            ISS_OUT,
            ISS_IN,
            wire::tcp_flags::ACK,
            &data[..13_500],
        );
        let second = tcp(
            v6,
            true,
            40000,
            ISS_OUT + 13_500,
            ISS_IN,
            wire::tcp_flags::ACK,
            &data[13_500..],
        );
        let mut out = Vec::new();
        px.inbound_burst([pool.packet(&first), pool.packet(&second)], 10, &mut out);
        let mut replies = Vec::new();
        px.take_replies(&mut replies);
        assert!(replies.is_empty(), "no ICMP error for a coalesced packet");
        let frames = drain(&mut px, out, 20);
        let mut got = streams(&frames, IMTU);
        assert!(
            joined(got.remove(&40000).unwrap(), ISS_OUT) == data,
            "intact"
        );
        // 21,000 B of payload: two full iMTU packets and the rest, as the Appendix shows.
        let payload = IMTU - if v6 { 60 } else { 40 };
        assert_eq!(frames.len(), 21_000usize.div_ceil(payload), "v6 {v6}");
        let r = px.report();
        assert_eq!(
            (r.coalesced.inbound, r.coalesced.inbound_segments),
            (1, 2),
            "the 13.5 KB one cut in two; the 7.5 KB one fits the iMTU"
        );
        assert_eq!(r.drops.oversize_inbound, 0);
        assert_eq!(
            r.inbound_oversize.frag_needed_sent + r.inbound_oversize.ptb_sent,
            0
        );
        drop(frames);
        assert_eq!(pool.in_use(), 0, "nothing leaked");
    }
}

#[test]
fn a_coalesced_segment_of_an_unknown_connection_is_cut_and_passed() {
    let pool = HeapPool::new(1024);
    let mut px = common::pipeline_with("", "");
    let data = pattern(60_000, 5);
    let frame = tcp(
        false,
        true,
        40001,
        77,
        1,
        wire::tcp_flags::ACK | wire::tcp_flags::PSH,
        &data,
    );
    let mut out = Vec::new();
    px.inbound_burst([pool.packet(&frame)], 10, &mut out);
    let frames = drain(&mut px, out, 20);
    assert_eq!(
        frames.len(),
        60_000usize.div_ceil(IMTU - 40),
        "cut at the iMTU"
    );
    let mut got = streams(&frames, IMTU);
    assert!(joined(got.remove(&40001).unwrap(), 77) == data, "intact");
    // PSH stays on the last piece only.
    let psh: Vec<bool> = frames
        .iter()
        .map(
            |f| match SlicedPacket::from_ethernet(f).unwrap().transport {
                Some(TransportSlice::Tcp(t)) => t.psh(),
                _ => unreachable!(),
            },
        )
        .collect();
    assert_eq!(psh.iter().filter(|&&p| p).count(), 1);
    assert!(psh[psh.len() - 1]);
}

#[test]
fn a_damaged_coalesced_segment_is_dropped_not_rechecksummed() {
    let pool = HeapPool::new(1024);
    let mut px = common::pipeline_with("", "");
    handshake(&mut px, &pool, false, 40002);
    let mut frame = tcp(
        false,
        true,
        40002,
        ISS_OUT,
        ISS_IN,
        wire::tcp_flags::ACK,
        &pattern(20_000, 1),
    );
    let last = frame.len() - 1;
    frame[last] ^= 0x5a;
    let mut out = Vec::new();
    px.inbound_burst([pool.packet(&frame)], 10, &mut out);
    let frames = drain(&mut px, out, 20);
    assert!(
        frames.is_empty(),
        "nothing with a fresh checksum over damaged bytes"
    );
    drop(frames);
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}

#[test]
fn a_coalesced_outbound_segment_is_split_to_the_path_mtu_without_icmp() {
    let pool = HeapPool::new(1024);
    let mut px = common::pipeline_with("", "");
    handshake(&mut px, &pool, false, 40003);
    let data = pattern(64_000, 9);
    let frame = tcp(
        false,
        false,
        40003,
        ISS_IN,
        ISS_OUT,
        wire::tcp_flags::ACK,
        &data,
    );
    let mut out = Vec::new();
    px.outbound_burst([pool.packet(&frame)], 10, &mut out);
    let mut replies = Vec::new();
    px.take_inside_replies(&mut replies);
    assert!(replies.is_empty(), "no Packet Too Big for the inside host");
    let frames: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    // The outside's SYN announced MSS 1460: 1500 B packets.
    let mut got = streams(&frames, 1500);
    assert!(
        joined(got.remove(&40003).unwrap(), ISS_IN) == data,
        "intact"
    );
    let r = px.report();
    assert_eq!((r.drops.split_failed, r.coalesced.outbound), (0, 1));
}

/// Many connections, segments of varied sizes (some above the iMTU, as LRO makes them),
/// interleaved and in bursts of 32: every connection's bytes arrive whole and in order, with
/// and without the NIC's RSS hash (the engine's fast path, and its grouping).
#[test]
fn whole_bursts_keep_every_stream_intact_with_and_without_rss() {
    // Without the RSS hash (grouped by flow), with it (in arrival order), and with the NIC's
    // checksum verdicts too (the engine's fast path takes segments before the pipeline parses
    // them).
    for (rss, verdicts) in [(false, false), (true, false), (true, true)] {
        let pool = HeapPool::new(8192);
        let mut px = common::pipeline_with("", "");
        let ports: Vec<u16> = (41000..41024).collect();
        for &p in &ports {
            handshake(&mut px, &pool, p.is_multiple_of(3), p);
        }
        let mut rng = 0x9e37_79b9_u32;
        let mut next = |n: u32| {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng % n
        };
        let mut sent: Vec<Vec<u8>> = vec![Vec::new(); ports.len()];
        let mut frames = Vec::new();
        for round in 0..40 {
            let i = next(ports.len() as u32) as usize;
            // Runs of a few segments per flow, as a switch interleaves TSO bursts.
            for _ in 0..1 + next(6) {
                let len = match next(10) {
                    0 => 9_000 + next(20_000) as usize, // coalesced
                    1 => 1 + next(1000) as usize,
                    _ => 1448,
                };
                let p = ports[i];
                let data = pattern(len, round + i);
                let seq = ISS_OUT.wrapping_add(sent[i].len() as u32);
                let f = tcp(
                    p.is_multiple_of(3),
                    true,
                    p,
                    seq,
                    ISS_IN,
                    wire::tcp_flags::ACK,
                    &data,
                );
                sent[i].extend_from_slice(&data);
                frames.push((f, p));
            }
        }
        let mut out = Vec::new();
        for (b, burst) in frames.chunks(32).enumerate() {
            let bufs = burst.iter().map(|(f, p)| {
                let mut buf = pool.packet(f);
                if rss {
                    buf.set_rss_hash(Some(u32::from(*p).wrapping_mul(0x9e37_79b9)));
                }
                if verdicts {
                    buf.set_ip_csum_verdict(Some(true));
                    buf.set_l4_csum_verdict(Some(true));
                }
                buf
            });
            px.inbound_burst(bufs, 10 + b as u64 * 1000, &mut out);
        }
        let frames = drain(&mut px, out, 1_000_000_000);
        let mut got = streams(&frames, IMTU);
        for (i, &p) in ports.iter().enumerate() {
            let segs = got.remove(&p).unwrap_or_default();
            assert!(
                joined(segs, ISS_OUT) == sent[i],
                "port {p}, rss {rss}: bytes differ"
            );
        }
        let r = px.report();
        assert!(r.merge.merges > 0, "segments were merged (rss {rss})");
        drop(frames);
        assert_eq!(pool.in_use(), 0, "nothing leaked");
    }
}

/// A connection evicted from the table while the engine merges its segments (a full table
/// makes room for a newer one within the same burst) stops being merged at once: the segment
/// that continued its item on the engine's fast path sends the item on, and the next segment
/// passes unmerged, after it. Nothing is held for a connection the gateway no longer knows.
#[test]
fn a_connection_evicted_mid_burst_stops_being_merged_in_order() {
    use wire::tcp_flags::ACK;
    let pool = HeapPool::new(1024);
    let nic = |f: &[u8], port: u16| from_nic(&pool, f, port);
    let (a, b) = (41000, 41001);
    let mut px = one_slot_with(&pool, a, b);
    // Warm the engine's choice of path: a burst of A's segments that continue one another.
    let seg = |k: u32| {
        tcp(
            false,
            true,
            a,
            ISS_OUT + k * 1000,
            ISS_IN,
            ACK,
            &pattern(1000, k as usize),
        )
    };
    let mut out = Vec::new();
    px.inbound_burst((0..4).map(|k| nic(&seg(k), a)), 10, &mut out);
    let first = drain_now(&mut out);
    // A's next segment starts an item; B's ACK completes B, which evicts A (max = 1); A's two
    // segments after it: the first continues the item on the fast path, the second finds A gone.
    let burst = [
        nic(&seg(4), a),
        nic(&tcp(false, true, b, ISS_OUT, ISS_IN, ACK, &[]), b),
        nic(&seg(5), a),
        nic(&seg(6), a),
    ];
    px.inbound_burst(burst, 20, &mut out);
    let r = px.report();
    assert_eq!(r.mss.established_evicted, 1, "B's completion evicted A");
    assert!(!px.holding(), "nothing is held for A");
    let frames: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    drop(out);
    assert_eq!(
        segments_of(&frames, a),
        [(4000, 2000), (6000, 1000)],
        "segments 4 and 5 merged and sent on when A went, then 6 alone, in order \
         (before: {first:?})"
    );
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}

/// What left so far, as frames (the buffers are freed).
fn drain_now(out: &mut Vec<HeapBuf>) -> Vec<usize> {
    out.drain(..).map(|b| b.len()).collect()
}

/// What `net_af_packet` hands up when the kernel coalesced past its ring frame: a frame cut
/// short, its IP header still claiming the whole packet. Dropped and counted both ways, as
/// Linux drops it; never answered with ICMP (it would teach the inside host a false path MTU),
/// never forwarded.
#[test]
fn a_frame_cut_short_of_its_ip_length_is_dropped_and_counted() {
    let pool = HeapPool::new(1024);
    let mut px = common::pipeline_with("", "");
    handshake(&mut px, &pool, false, 40004);
    let cut = |inbound: bool| {
        let mut f = tcp(
            false,
            inbound,
            40004,
            ISS_OUT,
            ISS_IN,
            wire::tcp_flags::ACK,
            &pattern(30_000, 2),
        );
        f.truncate(10_174);
        pool.packet(&f)
    };
    let mut out = Vec::new();
    px.inbound_burst([cut(true)], 10, &mut out);
    px.outbound_burst([cut(false)], 10, &mut out);
    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    px.take_replies(&mut outside);
    px.take_inside_replies(&mut inside);
    px.flush(20, &mut out);
    assert!(
        out.is_empty() && outside.is_empty() && inside.is_empty(),
        "dropped, unanswered"
    );
    let r = px.report();
    assert_eq!(r.drops.bad_ip_length, 2);
    assert_eq!((r.drops.split_failed, r.drops.oversize), (0, 0));
}

/// LRO packets as a NIC delivers them (chains of one buffer per segment, the RSS hash and good
/// checksum verdicts), toward an inside port with checksum offload and TSO: the engine takes
/// each one whole where its item has room, on the fast path, and the outputs are byte for byte
/// what the general path makes of the same packets without the hash; the stream is intact and
/// every packet above the iMTU asks the NIC to cut it there.
#[test]
fn lro_chains_join_whole_and_leave_as_the_general_path_sends_them() {
    const MSS: usize = 1448;
    const LRO_SEGMENTS: [usize; 9] = [9, 3, 11, 7, 9, 5, 11, 10, 4];
    /// The frames sent inside (bytes, TSO segment size), the report, the fast path's joins.
    type Run = (Vec<(Vec<u8>, Option<u16>)>, pxgw::stats::Report, u64);
    let run = |v6: bool, rss: bool| -> Run {
        let pool = HeapPool::new(256);
        let mut px = offloaded_pipeline(u16::MAX, "");
        handshake(&mut px, &pool, v6, 40100);
        let mut out = Vec::new();
        let mut seq = ISS_OUT;
        // Bursts of LRO packets of 3 to 11 segments, one packet per burst, as one flow's
        // segments coalesce between two polls of the queue.
        for (b, segs) in LRO_SEGMENTS.into_iter().enumerate() {
            let data = pattern(segs * MSS, b);
            let frame = tcp(v6, true, 40100, seq, ISS_IN, wire::tcp_flags::ACK, &data);
            let hdr = frame.len() - data.len();
            let mut chain = pool.packet(&frame[..hdr + MSS]);
            for piece in frame[hdr + MSS..].chunks(MSS) {
                assert!(chain.chain(pool.packet(piece)).is_ok());
            }
            assert_eq!(chain.num_segs(), segs);
            if rss {
                chain.set_rss_hash(Some(0x5eed_0001));
            }
            chain.set_ip_csum_verdict(Some(true));
            chain.set_l4_csum_verdict(Some(true));
            px.inbound_burst([chain], 10 + b as u64 * 5_000, &mut out);
            seq = seq.wrapping_add(data.len() as u32);
        }
        px.flush(1_000_000, &mut out);
        let frames = out
            .iter()
            .map(|p| (p.to_vec(), p.requested_tx_offload().map(|o| o.tso_segsz)))
            .collect();
        drop(out);
        assert_eq!(pool.in_use(), 0, "nothing leaked");
        (frames, px.report(), px.merge_stats().fast_merges)
    };
    for v6 in [false, true] {
        let (fast, r, fast_joins) = run(v6, true);
        let (general, _, none) = run(v6, false);
        assert_eq!(
            fast, general,
            "v6 {v6}: the fast path sends what the general path does"
        );
        // Each packet that continues its item joins on the fast path (the first of each item
        // and those the item has no room for take the general path); without the hash, none.
        assert!(
            fast_joins >= 3,
            "v6 {v6}: {fast_joins} LRO packets joined on the fast path"
        );
        assert_eq!(none, 0);
        let l34 = tcp(v6, true, 40100, ISS_OUT, ISS_IN, wire::tcp_flags::ACK, &[]).len() - 14;
        let mut data = Vec::new();
        for (f, tso) in &fast {
            let ip_len = f.len() - 14;
            if ip_len > IMTU {
                assert_eq!(*tso, Some((IMTU - l34) as u16), "v6 {v6}: cut at the iMTU");
            }
            data.extend_from_slice(&f[14 + l34..]);
        }
        let sent: Vec<u8> = LRO_SEGMENTS
            .into_iter()
            .enumerate()
            .flat_map(|(b, segs)| pattern(segs * MSS, b))
            .collect();
        assert!(data == sent, "v6 {v6}: the stream arrives intact, in order");
        // Those above the iMTU are coalesced; the others are segments like any.
        let above = LRO_SEGMENTS
            .iter()
            .filter(|&&n| l34 + n * MSS > IMTU)
            .count();
        assert_eq!(above, 6);
        assert_eq!(
            r.coalesced.inbound, above as u64,
            "v6 {v6}: every one counted"
        );
        assert_eq!(r.drops.oversize_inbound + r.drops.coalesced_failed, 0);
    }
}

/// A flow's next burst finds its connection through the merge engine's flow entry (the entry
/// outlives the flow's items): it is merged while the connection is known, and passes unmerged,
/// in order, once the connection was evicted between the bursts, though the entry and the
/// record beside it still name it and nothing else about the segments changed.
#[test]
fn a_flows_next_burst_is_merged_only_while_its_connection_is_known() {
    use wire::tcp_flags::{ACK, PSH};
    let pool = HeapPool::new(1024);
    let mut px = common::pipeline_with("", "[connections]\nmax = 1\n");
    let nic = |f: &[u8], port: u16| from_nic(&pool, f, port);
    let (a, b) = (42000, 42001);
    handshake(&mut px, &pool, false, a);
    // Segment k of A; the last of each burst carries PSH, so its item leaves with the burst.
    let seg = |k: u32, last: bool| {
        let flags = if last { ACK | PSH } else { ACK };
        tcp(
            false,
            true,
            a,
            ISS_OUT + k * 1000,
            ISS_IN,
            flags,
            &pattern(1000, k as usize),
        )
    };
    let a_of = |out: &mut Vec<HeapBuf>| {
        let frames: Vec<Vec<u8>> = out.drain(..).map(|b| b.to_vec()).collect();
        segments_of(&frames, a)
    };
    let mut out = Vec::new();
    px.inbound_burst((0..4).map(|k| nic(&seg(k, k == 3), a)), 10, &mut out);
    assert_eq!(a_of(&mut out), [(0, 4000)], "the first burst is merged");
    px.inbound_burst((4..8).map(|k| nic(&seg(k, k == 7), a)), 20, &mut out);
    assert_eq!(
        a_of(&mut out),
        [(4000, 4000)],
        "so is the next, A still known"
    );
    // B's handshake completes, which evicts A (max = 1); A's flow entry in the engine stays.
    handshake_at(&mut px, &pool, false, b, 21);
    assert_eq!(
        px.report().mss.established_evicted,
        1,
        "B's completion evicted A"
    );
    px.inbound_burst((8..12).map(|k| nic(&seg(k, k == 11), a)), 30, &mut out);
    assert_eq!(
        a_of(&mut out),
        [(8000, 1000), (9000, 1000), (10000, 1000), (11000, 1000)],
        "A's next burst passes unmerged, in order"
    );
    assert!(!px.holding(), "nothing is held for A");
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}

/// A pipeline whose ports grant `offloads`, with the extra configuration `extra`.
fn pipeline_offloading(offloads: pxgw::pipeline::Offloads, extra: &str) -> Pipeline<HeapBuf> {
    let cfg = pxgw::config::Config::parse(&format!(
        "[ports.external]\ndevice = \"net_null0\"\n[ports.internal]\ndevice = \"net_null1\"\n{extra}"
    ))
    .unwrap();
    Pipeline::new(&cfg, HeapPool::new(256), HeapPool::new(256), offloads).unwrap()
}

/// A pipeline toward an inside port that fills checksums, with TSO up to `tso` bytes (0: none),
/// and the extra configuration `extra`.
fn offloaded_pipeline(tso: u16, extra: &str) -> Pipeline<HeapBuf> {
    let offloads = pxgw::pipeline::Offloads {
        inside_checksum: true,
        inside_tso_max_len: tso,
        outside: pxio::split::SplitOffloads::default(),
    };
    pipeline_offloading(offloads, extra)
}

/// A pipeline whose connection table holds one connection: `a`'s, established; `b`'s
/// handshake up to the inside host's SYN-ACK, so that the outside's ACK, sent later, completes
/// it and evicts `a`.
fn one_slot_with(pool: &HeapPool, a: u16, b: u16) -> Pipeline<HeapBuf> {
    let mut px = common::pipeline_with("", "[connections]\nmax = 1\n");
    handshake(&mut px, pool, false, a);
    half_open(&mut px, pool, b);
    px
}

/// Opens the connection of `port` half-way through the pipeline: the outside's SYN and the
/// inside host's SYN-ACK; the outside's ACK, sent later, completes it.
fn half_open(px: &mut Pipeline<HeapBuf>, pool: &HeapPool, port: u16) {
    use wire::tcp_flags::{ACK, SYN};
    let mut out = Vec::new();
    px.inbound_burst(
        [from_nic(
            pool,
            &tcp(false, true, port, ISS_OUT - 1, 0, SYN, &[]),
            port,
        )],
        4,
        &mut out,
    );
    px.outbound_burst(
        [pool.packet(&tcp(
            false,
            false,
            port,
            ISS_IN - 1,
            ISS_OUT,
            SYN | ACK,
            &[],
        ))],
        5,
        &mut out,
    );
}

/// A damaged coalesced segment, which no NIC vouched for, is dropped and counted wherever its
/// checksums would be made afresh: taken whole toward an inside port with TSO (the engine takes
/// a 20 KB packet whole), or cut toward one that fills checksums (the cut sums nothing itself);
/// a damaged payload byte or a damaged IPv4 header (its TTL, which the TCP checksum does not
/// cover) alike. Nothing leaves with checksums made over damaged bytes.
#[test]
fn a_damaged_coalesced_segment_is_dropped_wherever_its_checksums_would_be_made_afresh() {
    for (tso, v6, damage_ip) in [
        (u16::MAX, false, false),
        (u16::MAX, true, false),
        (u16::MAX, false, true),
        (0, false, false),
        (0, true, false),
        (0, false, true),
    ] {
        let case = format!("tso {tso}, v6 {v6}, IPv4 header {damage_ip}");
        let pool = HeapPool::new(1024);
        let mut px = offloaded_pipeline(tso, "");
        handshake(&mut px, &pool, v6, 40003);
        let mut frame = tcp(
            v6,
            true,
            40003,
            ISS_OUT,
            ISS_IN,
            wire::tcp_flags::ACK,
            &pattern(20_000, 2),
        );
        if damage_ip {
            frame[14 + 8] ^= 0x01;
        } else {
            let last = frame.len() - 1;
            frame[last] ^= 0x5a;
        }
        let mut out = Vec::new();
        px.inbound_burst([pool.packet(&frame)], 10, &mut out);
        let frames = drain(&mut px, out, 20);
        assert!(frames.is_empty(), "{case}: nothing sent");
        drop(frames);
        let r = px.report();
        assert_eq!(r.drops.coalesced_failed, 1, "{case}: counted");
        assert_eq!(pool.in_use(), 0, "{case}: nothing leaked");
    }
}

/// A coalesced segment that leaves as it came, above the iMTU with a TSO request (nothing joins
/// it: it ends with PSH), is readied as DPDK's TSO contract requires: the TCP checksum field
/// holds the pseudo-header sum without the length, and the IPv4 header checksum is zero. With
/// its own checksum there, a NIC that adds to the seed would send every piece with a wrong one.
#[test]
fn a_coalesced_segment_left_whole_for_tso_carries_the_seed_the_nic_expects() {
    use pxio::checksum::{pseudo_header_v4, pseudo_header_v6};
    use wire::tcp_flags::{ACK, PSH};
    for v6 in [false, true] {
        let pool = HeapPool::new(1024);
        let mut px = offloaded_pipeline(u16::MAX, "");
        handshake(&mut px, &pool, v6, 40005);
        let frame = tcp(
            v6,
            true,
            40005,
            ISS_OUT,
            ISS_IN,
            ACK | PSH,
            &pattern(20_000, 3),
        );
        let mut pkt = pool.packet(&frame);
        pkt.set_l4_csum_verdict(Some(true));
        pkt.set_ip_csum_verdict(Some(true));
        let mut out = Vec::new();
        px.inbound_burst([pkt], 10, &mut out);
        px.flush(20, &mut out);
        assert_eq!(out.len(), 1, "v6 {v6}: one packet");
        let sent = out[0].to_vec();
        let l34 = frame.len() - 20_000 - 14;
        let tso = out[0].requested_tx_offload().expect("a TSO request");
        assert_eq!(
            usize::from(tso.tso_segsz),
            IMTU - l34,
            "v6 {v6}: cut at the iMTU"
        );
        assert_eq!(
            sent[14 + l34..],
            frame[14 + l34..],
            "v6 {v6}: the payload as it came"
        );
        let (seed, tcp_at) = if v6 {
            let (src, dst) = (OUTSIDE6, INSIDE6);
            (pseudo_header_v6(src, dst, 6, 0).fold(), 14 + 40)
        } else {
            assert_eq!(sent[14 + 10..14 + 12], [0, 0], "the IPv4 checksum zeroed");
            (pseudo_header_v4(OUTSIDE, INSIDE, 6, 0).fold(), 14 + 20)
        };
        assert_eq!(
            u16::from_be_bytes([sent[tcp_at + 16], sent[tcp_at + 17]]),
            seed,
            "v6 {v6}: the TCP checksum field holds the seed"
        );
        drop(out);
        assert_eq!(pool.in_use(), 0, "nothing leaked");
    }
}

/// A connection evicted while the engine holds an item of it: its next segment, which the fast
/// path does not take (it acknowledges more), finds the connection gone and is sent on unmerged;
/// what the engine held of the flow goes first, so nothing is reordered.
#[test]
fn a_segment_of_a_connection_gone_while_the_engine_holds_its_data_goes_after_that_data() {
    use wire::tcp_flags::ACK;
    let pool = HeapPool::new(1024);
    let nic = |f: &[u8], port: u16| from_nic(&pool, f, port);
    let (a, b) = (41100, 41101);
    let mut px = one_slot_with(&pool, a, b);
    let seg = |k: u32, ack: u32| {
        tcp(
            false,
            true,
            a,
            ISS_OUT + k * 1000,
            ack,
            ACK,
            &pattern(1000, k as usize),
        )
    };
    // Warm the engine's choice of path: a burst of A's segments that continue one another, so
    // that the next burst is taken in arrival order, each segment merged as it comes.
    let mut out = Vec::new();
    px.inbound_burst((0..4).map(|k| nic(&seg(k, ISS_IN), a)), 10, &mut out);
    px.flush(15, &mut out);
    // A's segment starts an item; B's ACK completes B, which evicts A (max = 1); A's next two
    // segments acknowledge more than the item's, so the fast path leaves them to the pipeline.
    let burst = [
        nic(&seg(4, ISS_IN), a),
        nic(&tcp(false, true, b, ISS_OUT, ISS_IN, ACK, &[]), b),
        nic(&seg(5, ISS_IN + 100), a),
        nic(&seg(6, ISS_IN + 200), a),
    ];
    px.inbound_burst(burst, 20, &mut out);
    px.flush(30, &mut out);
    assert_eq!(
        px.report().mss.established_evicted,
        1,
        "B's completion evicted A"
    );
    let frames: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    drop(out);
    assert_eq!(
        segments_of(&frames, a),
        [(0, 4000), (4000, 1000), (5000, 1000), (6000, 1000)],
        "A's segments in order"
    );
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}

/// A coalesced chain of more buffers than the inside port sends in one packet (`max_segs`, its
/// `nb_seg_max`) is not taken whole, which could leave it as it came: it is cut at the iMTU, and
/// no packet leaves with more buffers than the port takes. The stream arrives intact.
#[test]
fn a_coalesced_chain_longer_than_the_port_sends_is_cut_at_the_imtu() {
    use wire::tcp_flags::{ACK, PSH};
    const PIECE: usize = 2000;
    let pool = HeapPool::new(1024);
    let mut px = offloaded_pipeline(u16::MAX, "[merge]\nmax_segs = 8\n");
    handshake(&mut px, &pool, false, 40006);
    let data = pattern(15 * PIECE, 4);
    let frame = tcp(false, true, 40006, ISS_OUT, ISS_IN, ACK | PSH, &data);
    let hdr = frame.len() - data.len();
    let mut chain = pool.packet(&frame[..hdr + PIECE]);
    for piece in frame[hdr + PIECE..].chunks(PIECE) {
        assert!(chain.chain(pool.packet(piece)).is_ok());
    }
    assert_eq!(chain.num_segs(), 15);
    chain.set_l4_csum_verdict(Some(true));
    chain.set_ip_csum_verdict(Some(true));
    let mut out = Vec::new();
    px.inbound_burst([chain], 10, &mut out);
    px.flush(20, &mut out);
    assert!(out.len() > 1, "cut");
    for p in &out {
        assert!(p.num_segs() <= 8, "{} buffers in one packet", p.num_segs());
    }
    let frames: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    drop(out);
    let got: Vec<u8> = frames.iter().flat_map(|f| f[hdr..].to_vec()).collect();
    assert!(got == data, "the stream intact, in order");
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}

/// An inside host's segment that arrived damaged, with no NIC verdict, is not split into pieces
/// whose checksums the outside port's NIC would make afresh (TSO, or checksum offload): it is
/// dropped and counted, as a cut in software drops it. Both families, both offloads.
#[test]
fn a_damaged_outbound_segment_is_not_split_into_freshly_checksummed_pieces() {
    use pxgw::pipeline::Offloads;
    use pxio::split::SplitOffloads;
    for (v6, tso) in [(false, true), (true, true), (false, false), (true, false)] {
        let pool = HeapPool::new(1024);
        let offloads = Offloads {
            inside_checksum: false,
            inside_tso_max_len: 0,
            outside: SplitOffloads {
                tso,
                checksum: true,
            },
        };
        let mut px = pipeline_offloading(offloads, "");
        handshake(&mut px, &pool, v6, 40007);
        let mut frame = tcp(
            v6,
            false,
            40007,
            ISS_IN,
            ISS_OUT,
            wire::tcp_flags::ACK,
            &pattern(8_000, 5),
        );
        let last = frame.len() - 1;
        frame[last] ^= 0x21;
        let mut out = Vec::new();
        px.outbound_burst([pool.packet(&frame)], 10, &mut out);
        assert!(out.is_empty(), "v6 {v6}, tso {tso}: nothing sent");
        assert_eq!(
            px.report().drops.split_failed,
            1,
            "v6 {v6}, tso {tso}: counted"
        );
        assert_eq!(pool.in_use(), 0, "nothing leaked");
    }
}

/// `frame`, an untagged Ethernet frame, with an 802.1Q tag of `tci` after its MAC addresses
/// (no checksum covers the link header).
fn vlan_tagged(frame: &[u8], tci: u16) -> Vec<u8> {
    let [hi, lo] = tci.to_be_bytes();
    [&frame[..12], &[0x81, 0x00, hi, lo], &frame[12..]].concat()
}

/// Inbound TCP packets above the iMTU are counted as coalesced (`coalesced.inbound`), and only
/// they: a VLAN-tagged frame carrying an IP packet of exactly the iMTU is four bytes longer
/// than an untagged one, not coalesced, whether the engine's fast path takes it or not; a
/// tagged packet above the iMTU is. Both families.
#[test]
fn only_packets_above_the_imtu_count_as_coalesced_when_tagged() {
    for v6 in [false, true] {
        let pool = HeapPool::new(256);
        let mut px = offloaded_pipeline(u16::MAX, "");
        let port = 40200;
        handshake(&mut px, &pool, v6, port);
        // An IP packet of exactly the iMTU.
        let payload = IMTU - if v6 { 60 } else { 40 };
        let tagged = |seq: u32, len: usize, salt: usize| {
            let f = tcp(
                v6,
                true,
                port,
                seq,
                ISS_IN,
                wire::tcp_flags::ACK,
                &pattern(len, salt),
            );
            from_nic(&pool, &vlan_tagged(&f, 7), port)
        };
        let mut out = Vec::new();
        let mut seq = ISS_OUT;
        // Bursts of four iMTU-sized segments that continue one another: the first burst warms
        // the engine's choice of path, the next ones go on its fast path.
        for b in 0..3u64 {
            let burst: Vec<HeapBuf> = (0..4)
                .map(|k| {
                    let s = tagged(seq, payload, k);
                    seq = seq.wrapping_add(payload as u32);
                    s
                })
                .collect();
            assert!(burst.iter().all(|p| p.len() == 18 + IMTU));
            px.inbound_burst(burst, 10 + b * 1000, &mut out);
        }
        assert!(
            px.merge_stats().fast_merges > 0,
            "v6 {v6}: the fast path took some"
        );
        assert_eq!(
            px.report().coalesced.inbound,
            0,
            "v6 {v6}: no iMTU-sized packet is coalesced"
        );
        // A tagged packet above the iMTU is.
        px.inbound_burst([tagged(seq, 3 * payload, 9)], 5_000, &mut out);
        assert_eq!(
            px.report().coalesced.inbound,
            1,
            "v6 {v6}: a packet above the iMTU is"
        );
        px.flush(1_000_000, &mut out);
        let frames: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
        drop(out);
        // Merged past the iMTU (TSO toward the inside): the payload bytes, counted whole.
        let bytes: usize = frames
            .iter()
            .filter_map(|f| wire::Parsed::of(f, f.len()).tcp().copied())
            .filter(|h| h.key.sport == port)
            .map(|h| usize::from(h.payload_len))
            .sum();
        assert_eq!(bytes, 15 * payload, "v6 {v6}: every byte went inside");
        assert_eq!(pool.in_use(), 0, "nothing leaked");
    }
}
