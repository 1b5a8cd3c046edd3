//! A caravan of one is never built, so a UDP flood of flows that never pair up does not turn
//! every datagram into a caravan of one (`docs/caravan.md`, "Single datagrams"): a datagram that
//! nothing joined before its flow's caravan would leave goes inside as it came, not behind 16
//! bytes of caravan headers.

mod common;

use pxgw::pipeline::Pipeline;
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};

/// The pipeline's caravan timeout in ns (default 50 µs).
const TIMEOUT_NS: u64 = 50_000;

fn pipeline() -> Pipeline<HeapBuf> {
    common::pipeline_with("", "")
}

/// A datagram from outside, flow `sport` → 7000, with `payload`, TTL `ttl` and DSCP `dscp`.
fn udp(v6: bool, sport: u16, ttl: u8, dscp: u8, payload: &[u8]) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: if v6 {
            wire::ethernet::ethertype::IPV6
        } else {
            wire::ethernet::ethertype::IPV4
        },
    };
    let ip = common::ip_from_outside(v6, 1, ttl, dscp);
    let udp = wire::UdpRepr {
        src_port: sport,
        dst_port: 7000,
    };
    wire::udp_frame(ethernet, ip, udp, payload).unwrap()
}

fn is_caravan(frame: &[u8]) -> bool {
    pxio::caravan::is_caravan(frame, frame.len(), pxio::caravan::DEFAULT_DSCP)
}

/// Feeds `frames` inbound at time 0, then lets every caravan time out.
fn run(px: &mut Pipeline<HeapBuf>, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let pool = HeapPool::new(256);
    let mut out = Vec::new();
    for f in frames {
        px.inbound(pool.packet(f), 0, &mut out);
    }
    px.end_of_burst(0, &mut out);
    px.poll(TIMEOUT_NS, &mut out);
    let bytes = out.iter().map(PacketBuf::to_vec).collect();
    drop(out);
    assert_eq!(pool.in_use(), 0, "nothing leaked");
    bytes
}

/// A flood of 1000 flows, one datagram each: every datagram goes inside byte for byte as it came,
/// no caravan is built, no byte of overhead is added.
#[test]
fn a_flood_of_single_datagrams_passes_unwrapped() {
    for v6 in [false, true] {
        let mut px = pipeline();
        let frames: Vec<Vec<u8>> = (0..1000u16)
            .map(|i| udp(v6, 10_000 + i, 64, 0, &i.to_be_bytes().repeat(50)))
            .collect();
        let out = run(&mut px, &frames);
        assert_eq!(out.len(), frames.len(), "v6 {v6}");
        let r = px.report();
        assert_eq!(r.caravan.caravans_built, 0, "v6 {v6}");
        let mut sorted = out.clone();
        sorted.sort();
        let mut sent = frames.clone();
        sent.sort();
        assert!(sorted == sent, "v6 {v6}: every datagram as it came");
        assert_eq!(r.caravan.datagrams_packed, 0, "v6 {v6}");
        assert_eq!(r.caravan.unwrapped_single, 1000, "v6 {v6}");
        let bytes_in: usize = frames.iter().map(Vec::len).sum();
        assert_eq!(r.inbound.bytes_in, bytes_in as u64, "v6 {v6}");
    }
}

/// Two datagrams of a flow still travel as one caravan; a lone one that wore the caravan mark
/// goes inside re-marked to DSCP 0, as every unpacked datagram does.
#[test]
fn two_datagrams_make_a_caravan_and_a_lone_marked_one_is_re_marked() {
    let mut px = pipeline();
    let frames = [
        udp(false, 1, 64, 0, b"a"),
        udp(false, 1, 64, 0, b"b"),
        udp(false, 2, 64, 7, b"lone, marked"),
    ];
    let out = run(&mut px, &frames);
    assert_eq!(out.len(), 2, "{out:?}");
    let (caravan, lone) = if is_caravan(&out[0]) {
        (&out[0], &out[1])
    } else {
        (&out[1], &out[0])
    };
    assert!(is_caravan(caravan));
    assert!(!is_caravan(lone));
    assert_eq!(lone[15] >> 2, 0, "re-marked");
    let mut want = frames[2].clone();
    want[15] = 0;
    let mut ip = wire::Ipv4Packet::new_unchecked(&mut want[14..]);
    ip.fill_checksum();
    assert_eq!(*lone, want, "otherwise as it came");
    let r = px.report();
    assert_eq!(
        (r.caravan.caravans_built, r.caravan.datagrams_packed),
        (1, 2)
    );
    assert_eq!(r.caravan.unwrapped_single, 1);
}

/// A datagram that cannot join its flow's held one (another TTL) lets it go first, as it came;
/// the flow keeps its order.
#[test]
fn a_held_datagram_that_nothing_joins_leaves_first_as_it_came() {
    let mut px = pipeline();
    let frames = [
        udp(false, 1, 64, 0, b"first"),
        udp(false, 1, 63, 0, b"second"),
        udp(false, 1, 63, 0, b"third"),
    ];
    let out = run(&mut px, &frames);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[0], frames[0], "the held datagram, as it came, first");
    assert!(is_caravan(&out[1]), "second and third travel together");
    let r = px.report();
    assert_eq!(
        (r.caravan.caravans_built, r.caravan.unwrapped_single),
        (1, 1)
    );
}

/// Caravans leave in the order they were opened, whatever their flows (the pipeline keeps them
/// in a hash map with a random seed): datagrams of 64 flows, opened one nanosecond apart in an
/// order unrelated to their ports, come out in that order when their timeouts pass in one poll,
/// and again when a shutdown flushes them, run after run.
#[test]
fn caravans_leave_oldest_first() {
    let sport = |i: u16| 20_000 + (i * 37) % 64;
    for v6 in [false, true] {
        for flush in [false, true] {
            let mut px = pipeline();
            let pool = HeapPool::new(256);
            let mut out = Vec::new();
            for i in 0..64u16 {
                let frame = udp(v6, sport(i), 64, 0, &[i as u8; 40]);
                px.inbound(pool.packet(&frame), u64::from(i), &mut out);
            }
            px.end_of_burst(64, &mut out);
            assert!(out.is_empty(), "single datagrams wait for company");
            if flush {
                px.flush(65, &mut out);
            } else {
                px.poll(TIMEOUT_NS + 64, &mut out);
            }
            let ports: Vec<u16> = out
                .iter()
                .map(|p| match wire::classify(p.head(), p.len()) {
                    wire::Class::Udp(h) => h.key.sport,
                    other => panic!("not a datagram: {other:?}"),
                })
                .collect();
            let opened: Vec<u16> = (0..64).map(sport).collect();
            assert_eq!(ports, opened, "v6 {v6}, flush {flush}");
            drop(out);
            assert_eq!(pool.in_use(), 0);
        }
    }
}

/// A flow whose caravan is full starts afresh: the datagram that does not fit sends the full
/// caravan on and waits as the flow's newest, so a flow that opened before it leaves first
/// when its time comes, and the datagram only when its own time does. Handed over one at a
/// time and in bursts (which find a flow's caravan by its header bytes).
#[test]
fn a_datagram_that_fits_no_caravan_waits_as_the_newest() {
    for v6 in [false, true] {
        for burst in [false, true] {
            let case = format!("v6 {v6}, burst {burst}");
            let pool = HeapPool::new(256);
            let feed = |px: &mut Pipeline<HeapBuf>, frame: &[u8], now: u64, out: &mut _| {
                if burst {
                    px.inbound_burst([pool.packet(frame)], now, out);
                } else {
                    px.inbound(pool.packet(frame), now, out);
                    px.end_of_burst(now, out);
                }
            };
            let a = |i: u8| udp(v6, 1000, 64, 0, &[i; 1400]);
            // How many of flow A's datagrams it takes for one not to fit.
            let fill = {
                let (mut px, mut out) = (pipeline(), Vec::new());
                let mut n = 0u8;
                while out.is_empty() {
                    assert!(n < 64, "{case}: a caravan never filled");
                    feed(&mut px, &a(n), 0, &mut out);
                    n += 1;
                }
                n
            };
            let (mut px, mut out) = (pipeline(), Vec::new());
            for i in 0..fill - 1 {
                feed(&mut px, &a(i), 0, &mut out);
            }
            // Flow B opens at 10; A's datagram that does not fit comes at 20.
            feed(&mut px, &udp(v6, 2000, 64, 0, &[9; 100]), 10, &mut out);
            assert!(out.is_empty(), "{case}");
            let last = a(fill - 1);
            feed(&mut px, &last, 20, &mut out);
            assert_eq!(out.len(), 1, "{case}");
            assert!(
                is_caravan(&out[0].to_vec()),
                "{case}: the full caravan leaves"
            );
            out.clear();
            let sports = |out: &[HeapBuf]| -> Vec<u16> {
                out.iter()
                    .map(|p| match wire::classify(p.head(), p.len()) {
                        wire::Class::Udp(h) => h.key.sport,
                        other => panic!("not a datagram: {other:?}"),
                    })
                    .collect()
            };
            // B's time has come, A's datagram's not yet; then A's.
            px.poll(TIMEOUT_NS + 10, &mut out);
            assert_eq!(sports(&out), [2000], "{case}");
            px.poll(TIMEOUT_NS + 20, &mut out);
            assert_eq!(sports(&out), [2000, 1000], "{case}");
            assert_eq!(out[1].to_vec(), last, "{case}: it leaves as it came");
            drop(out);
            assert_eq!(pool.in_use(), 0, "{case}: nothing leaked");
        }
    }
}
