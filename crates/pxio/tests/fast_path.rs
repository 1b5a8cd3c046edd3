//! The fast path (`merge::fast`): with the NIC's RSS hash and checksum verdicts, a segment that
//! continues its flow's only item joins it, or is cut into it at the iMTU, before it is parsed;
//! the hash is only a hint, so flows that share one merge exactly as flows that do not.

mod common;

use common::{check_outputs, config, simple_flow as flow, Case, FlowSpec, Input, SegFlags, SegHdr};
use pxio::merge::{MergeConfig, Merger};
use pxio::{HeapBuf, HeapPool, PacketBuf};

/// `n` in-order segments of `len` bytes of each of `flows`, taking turns, all in one burst.
fn interleaved(flows: &[FlowSpec], n: usize, len: usize) -> Case {
    let mut rng = common::Rng::new(0x5eed);
    let streams: Vec<Vec<u8>> = flows
        .iter()
        .map(|_| (0..n * len).map(|_| rng.next() as u8).collect())
        .collect();
    let mut inputs = Vec::new();
    for k in 0..n {
        for (fi, f) in flows.iter().enumerate() {
            let chunk = &streams[fi][k * len..(k + 1) * len];
            let hdr = SegHdr::of(f, 1);
            inputs.push(Input::data(
                f,
                fi,
                k * len,
                chunk,
                k as u16,
                hdr,
                SegFlags::default(),
            ));
        }
    }
    Case {
        flows: flows.to_vec(),
        streams,
        bursts: vec![(inputs.len(), 0)],
        inputs,
    }
}

/// Runs `case` with the NIC's verdicts and an RSS hash per frame from `rss`; returns the
/// frames that left and the merger.
fn merge(case: &Case, rss: impl Fn(&[u8]) -> u32) -> (Vec<Vec<u8>>, Merger<HeapBuf>) {
    let cfg = MergeConfig {
        checksum_offload: false,
        ..config(9000, false)
    };
    merge_with(case, cfg, rss)
}

/// [`merge`] under `cfg`.
fn merge_with(
    case: &Case,
    cfg: MergeConfig,
    rss: impl Fn(&[u8]) -> u32,
) -> (Vec<Vec<u8>>, Merger<HeapBuf>) {
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
    let frames = common::run_with(
        case,
        &mut merger,
        |_, i| common::nic_packet(&pool, i, Some(rss(&i.frame))),
        |p| p.to_vec(),
    );
    assert_eq!(pool.in_use(), 0, "every buffer came back");
    (frames, merger)
}

/// The source port of an untagged IPv4 or IPv6 TCP frame: one hash per flow.
fn by_port(f: &[u8]) -> u32 {
    let l4 = if f[12..14] == [0x86, 0xdd] { 54 } else { 34 };
    u32::from(u16::from_be_bytes([f[l4], f[l4 + 1]]))
}

/// Every segment after a flow's first joins its item on the fast path or is cut into it there,
/// IPv4 and IPv6 side by side, and what leaves is what the receiver would get without the engine.
#[test]
fn segments_that_continue_their_item_take_the_fast_path() {
    let case = interleaved(&[flow(1), flow(2)], 30, 1448);
    let (frames, merger) = merge(&case, by_port);
    let s = merger.stats();
    assert!(s.cuts > 0, "30 segments of 1448 B cross the iMTU");
    assert_eq!(s.fast_merges, s.merges - s.cuts, "{s:?}");
    assert_eq!(s.run_merges, s.fast_merges);
    check_outputs(&case, &frames, 9000);
}

/// Two flows whose packets carry one RSS hash find each other's item in the fast index: the
/// masked header compare turns every such segment to the general path, which merges it exactly
/// as the fast path merges those of flows with hashes of their own.
#[test]
fn flows_sharing_a_hash_merge_as_flows_that_do_not() {
    let case = interleaved(&[flow(1), flow(3)], 30, 1448);
    let (shared_frames, shared) = merge(&case, |_| 0x5eed);
    let (own_frames, own) = merge(&case, by_port);
    assert_eq!(shared.stats().fast_merges, 0, "the hint never matched");
    assert!(own.stats().fast_merges > 0);
    let mut a = shared_frames.clone();
    let mut b = own_frames;
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same packets leave");
    assert_eq!(shared.stats().merges, own.stats().merges);
    assert_eq!(shared.stats().cuts, own.stats().cuts);
    check_outputs(&case, &shared_frames, 9000);
}

/// Two flows whose hashes differ but share the fast index's bucket (equal low bits) both keep
/// the fast path, taking turns in one burst, IPv4 and IPv6 side by side.
#[test]
fn flows_whose_hashes_share_a_bucket_both_take_the_fast_path() {
    let case = interleaved(&[flow(1), flow(2)], 30, 1448);
    let (frames, merger) = merge(&case, |f| by_port(f) << 20);
    let s = merger.stats();
    assert!(s.cuts > 0);
    assert_eq!(
        s.fast_merges,
        s.merges - s.cuts,
        "{} of {}",
        s.fast_merges,
        s.merges
    );
    check_outputs(&case, &frames, 9000);
}

/// An item that holds as many segments as it may waits for the burst's settle; the flow's
/// next segment starts a second item on the general path, and the segments after it join that
/// one on the fast path, exactly as the general path would have joined them (IPv4 and IPv6
/// side by side).
#[test]
fn segments_after_an_item_out_of_segments_join_the_next_one_on_the_fast_path() {
    let case = interleaved(&[flow(1), flow(2)], 8, 1000);
    let cfg = MergeConfig {
        checksum_offload: false,
        max_segs: 4,
        ..config(9000, false)
    };
    let (frames, merger) = merge_with(&case, cfg.clone(), by_port);
    let s = merger.stats();
    // Per flow: segments 0 and 4 start items, the other six join one.
    assert_eq!((s.merges, s.cuts), (12, 0));
    assert_eq!(s.fast_merges, s.merges, "every join is a fast one");
    // With one hash for both flows the hint (almost) never matches: the general path sends
    // the same packets.
    let (general_frames, general) = merge_with(&case, cfg, |_| 0x5eed);
    assert!(general.stats().fast_merges < s.fast_merges);
    let (mut a, mut b) = (frames.clone(), general_frames);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same packets leave");
    assert_eq!(frames.len(), 4, "two items per flow");
    check_outputs(&case, &frames, 9000);
}

/// A pure ACK passes at once while the engine holds nothing (`Merger::pass_if_idle`), counted
/// exactly as `rx` counts it, a damaged IPv4 header included; while it holds an item, or for a
/// segment with payload, it is handed back for `rx`, which keeps the flow's order.
#[test]
fn a_pure_ack_passes_an_idle_engine_as_rx_would() {
    use pxio::wire::{Class, Parsed};
    let frame = |seq: u32, payload: &[u8]| segment(40000, seq, payload);
    let headers = |f: &[u8]| match *Parsed::of(f, f.len()).class() {
        Class::Tcp(h) => h,
        _ => panic!("a TCP frame"),
    };
    let pool = HeapPool::new(64);
    let engine = || Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(64)).unwrap();
    let counts = |m: &Merger<HeapBuf>| {
        let s = m.stats();
        (
            s.packets_in,
            s.packets_out,
            s.passthrough,
            s.bad_ip_checksum,
        )
    };
    let ack = frame(1000, &[]);
    let mut damaged = ack.clone();
    damaged[14 + 10] ^= 0x5a; // the IPv4 header checksum
    for f in [&ack, &damaged] {
        let (mut idle, mut reference) = (engine(), engine());
        let (mut out, mut ref_out) = (Vec::new(), Vec::new());
        assert!(idle
            .pass_if_idle(pool.packet(f), &headers(f), &mut out)
            .is_ok());
        reference.rx(pool.packet(f), 0, &mut ref_out);
        assert_eq!(counts(&idle), counts(&reference));
        assert_eq!(
            counts(&idle).3,
            u64::from(f == &damaged),
            "a damaged header counted"
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].to_vec(), *f, "passed as it came");
    }
    // Holding an item: the ACK goes back, for `rx` to send after the item.
    let mut busy = engine();
    let mut out = Vec::new();
    let data = frame(1000, &[7; 1000]);
    busy.rx(pool.packet(&data), 0, &mut out);
    assert!(
        busy.stats().held_items > 0,
        "one segment, not settled: held"
    );
    assert!(busy
        .pass_if_idle(pool.packet(&ack), &headers(&ack), &mut out)
        .is_err());
    // Payload: never passed here.
    let mut idle = engine();
    assert!(idle
        .pass_if_idle(pool.packet(&data), &headers(&data), &mut out)
        .is_err());
    drop(out);
    drop(busy);
    assert_eq!(pool.in_use(), 0);
}

/// A bare ACK whose IPv4 header the NIC vouched for (`Merger::pass_bare_ack`) leaves as `rx`
/// sends it: after what the engine holds of its own flow, before what it holds of others, with
/// the same counters; an unvouched one is handed back for `rx`, which checks its header.
#[test]
fn a_bare_ack_leaves_after_its_flows_items_as_rx_sends_it() {
    use pxio::wire;
    let frame = segment;
    let pool = HeapPool::new(64);
    let engine = || Merger::<HeapBuf>::new(config(9000, false), HeapPool::new(64)).unwrap();
    let vouched = |f: &[u8]| {
        let mut p = pool.packet(f);
        p.set_ip_csum_verdict(Some(true));
        p.set_l4_csum_verdict(Some(true));
        p
    };
    let counts = |m: &Merger<HeapBuf>| {
        let s = m.stats();
        (s.packets_in, s.packets_out, s.passthrough, s.held_items)
    };
    // Two flows hold data; the ACK is the first flow's.
    let held = [
        frame(40000, 1000, &[7; 1000]),
        frame(40000, 2000, &[8; 1000]),
        frame(40001, 1000, &[9; 1000]),
    ];
    let ack = frame(40000, 3000, &[]);
    let key = wire::flow_of(&ack, ack.len()).unwrap();
    let (mut bare, mut reference) = (engine(), engine());
    let (mut out, mut ref_out) = (Vec::new(), Vec::new());
    for f in &held {
        bare.rx(vouched(f), 0, &mut out);
        reference.rx(vouched(f), 0, &mut ref_out);
    }
    assert!(bare.stats().held_items > 0, "held before the ACK");
    assert!(bare.pass_bare_ack(vouched(&ack), &key, 0, &mut out).is_ok());
    reference.rx(vouched(&ack), 0, &mut ref_out);
    assert_eq!(counts(&bare), counts(&reference));
    let bytes = |v: &[HeapBuf]| v.iter().map(|p| p.to_vec()).collect::<Vec<_>>();
    assert_eq!(
        bytes(&out),
        bytes(&ref_out),
        "the same packets, in the same order"
    );
    assert_eq!(
        out.last().map(|p| p.to_vec()),
        Some(ack.clone()),
        "after its flow's item"
    );
    assert!(
        bare.stats().held_items > 0,
        "the other flow's item still held"
    );
    // Idle: passed at once. Unvouched: handed back.
    let mut idle = engine();
    let mut out2 = Vec::new();
    assert!(idle
        .pass_bare_ack(vouched(&ack), &key, 0, &mut out2)
        .is_ok());
    assert_eq!(counts(&idle), (1, 1, 1, 0));
    assert!(idle
        .pass_bare_ack(pool.packet(&ack), &key, 0, &mut out2)
        .is_err());
    assert_eq!(
        counts(&idle),
        (1, 1, 1, 0),
        "nothing counted for what it gave back"
    );
    drop((out, ref_out, out2, bare, reference, idle));
    assert_eq!(pool.in_use(), 0);
}

/// A TCP/IPv4 segment from outside, port `sport` to 80, acknowledging 5000 (ACK set, no options).
fn segment(sport: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    use pxio::wire::{self, tcp_flags, EthernetRepr, IpRepr, Ipv4Repr, TcpRepr};
    let eth = EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: 0,
    };
    let ip = IpRepr::V4(Ipv4Repr {
        dont_frag: true,
        ..Ipv4Repr::new([198, 51, 100, 7], [198, 18, 8, 2])
    });
    let tcp = TcpRepr {
        src_port: sport,
        dst_port: 80,
        seq,
        ack: 5000,
        flags: tcp_flags::ACK,
        window: 65000,
        urgent: 0,
        options: &[],
    };
    wire::tcp_frame(eth, ip, tcp, payload).unwrap()
}
