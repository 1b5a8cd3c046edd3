//! A worker packs whole RX bursts, where a datagram whose headers repeat its flow's open
//! caravan's joins it by those bytes alone, with no parse and no lookup by key. That shortcut
//! must change nothing: the same caravans, the same datagrams passed, in the same order, with
//! the same counters, as when every frame is taken one at a time through the general path.
//! And the table of open caravans is bounded: a new flow with every place taken makes the
//! oldest caravan leave early, whole, counted.

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use pxgw::pipeline::Pipeline;
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};

/// The pipeline's caravan timeout in ns (default 50 µs).
const TIMEOUT_NS: u64 = 50_000;

/// How one frame of the mix differs from its flow's usual datagram.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    /// Wears the caravan mark (cleared, then packed).
    Marked,
    /// Another DSCP (never packed: it would be lost).
    OtherDscp,
    /// TTL 1 (passes unpacked, after what its flow holds).
    LowTtl,
    /// Another TTL (cannot join a caravan of TTL 64: starts the flow's next).
    Ttl63,
    /// Six bytes of Ethernet padding behind the IP packet.
    Padded,
    /// UDP length one more than the IP payload (malformed).
    BadUdpLength,
    /// The frame one byte shorter than its IP length (malformed).
    Truncated,
    /// A TCP segment of no connection (passes).
    Tcp,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        12 => Just(Kind::Plain),
        1 => Just(Kind::Marked),
        1 => Just(Kind::OtherDscp),
        1 => Just(Kind::LowTtl),
        1 => Just(Kind::Ttl63),
        1 => Just(Kind::Padded),
        1 => Just(Kind::BadUdpLength),
        1 => Just(Kind::Truncated),
        1 => Just(Kind::Tcp),
    ]
}

/// A frame from outside of flow `flow` (even: IPv4, odd: IPv6), `kind`, `len` payload bytes.
fn frame(flow: u8, kind: Kind, len: usize, seed: u8) -> Vec<u8> {
    let v6 = flow % 2 == 1;
    let payload: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
    let (dscp, ttl) = match kind {
        Kind::Marked => (pxio::caravan::DEFAULT_DSCP, 64),
        Kind::OtherDscp => (10, 64),
        Kind::LowTtl => (0, 1),
        Kind::Ttl63 => (0, 63),
        _ => (0, 64),
    };
    let ip = common::ip_from_outside(v6, flow, ttl, dscp);
    let sport = 10_000 + u16::from(flow);
    if let Kind::Tcp = kind {
        let tcp = wire::TcpRepr {
            src_port: sport,
            dst_port: 443,
            seq: u32::from(seed),
            ack: 1,
            flags: wire::tcp_flags::ACK,
            window: 512,
            urgent: 0,
            options: &[],
        };
        return wire::tcp_frame(common::FROM_OUTSIDE, ip, tcp, &payload).unwrap();
    }
    let udp = wire::UdpRepr {
        src_port: sport,
        dst_port: 7000,
    };
    let mut f = wire::udp_frame(common::FROM_OUTSIDE, ip, udp, &payload).unwrap();
    let l4 = 14 + if v6 { 40 } else { 20 };
    match kind {
        Kind::Padded => f.extend_from_slice(&[0xee; 6]),
        Kind::BadUdpLength => {
            let n = u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]) + 1;
            f[l4 + 4..l4 + 6].copy_from_slice(&n.to_be_bytes());
        }
        Kind::Truncated => {
            f.pop();
        }
        _ => {}
    }
    f
}

/// What left, byte for byte and in order, and the caravan counters.
type Outcome = (Vec<Vec<u8>>, pxgw::stats::CaravanSummary);

/// Feeds `bursts` (each at its own time, 10 µs apart, with a poll after each), then flushes:
/// whole bursts through `inbound_burst`, or one frame at a time through `inbound`.
fn run(px: &mut Pipeline<HeapBuf>, bursts: &[Vec<Vec<u8>>], whole: bool) -> Outcome {
    let pool = HeapPool::new(4096);
    let mut out = Vec::new();
    let mut now = 0;
    for burst in bursts {
        let pkts: Vec<HeapBuf> = burst.iter().map(|f| pool.packet(f)).collect();
        if whole {
            px.inbound_burst(pkts, now, &mut out);
        } else {
            for p in pkts {
                px.inbound(p, now, &mut out);
            }
            px.end_of_burst(now, &mut out);
        }
        now += 10_000;
        px.poll(now, &mut out);
    }
    px.flush(now + TIMEOUT_NS, &mut out);
    let frames = out.iter().map(PacketBuf::to_vec).collect();
    drop(out);
    assert_eq!(pool.in_use(), 0, "nothing leaked");
    (frames, px.report().caravan)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Bursts of runs of a few flows' datagrams, both families, every kind of difference a
    /// flow's datagrams can have: the same output and counters whole or one at a time.
    #[test]
    fn whole_bursts_pack_as_one_frame_at_a_time(
        frames in prop::collection::vec(
            (0u8..6, kind(), prop_oneof![0usize..64, 1000usize..1473], 1usize..6, any::<u8>()),
            1..60,
        ),
        cuts in prop::collection::vec(1usize..40, 1..20),
    ) {
        // Each entry is a run of datagrams of one flow, as a sender's burst arrives.
        let all: Vec<Vec<u8>> = frames
            .iter()
            .flat_map(|&(flow, kind, len, run, seed)| {
                (0..run).map(move |k| frame(flow, if k == 0 { kind } else { Kind::Plain }, len, seed.wrapping_add(k as u8)))
            })
            .collect();
        let mut bursts = Vec::new();
        let mut rest = &all[..];
        for &n in cuts.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (b, r) = rest.split_at(n.min(rest.len()));
            bursts.push(b.to_vec());
            rest = r;
        }
        let whole = run(&mut common::pipeline_with("", ""), &bursts, true);
        let single = run(&mut common::pipeline_with("", ""), &bursts, false);
        prop_assert_eq!(&whole.1, &single.1);
        let (a, b) = (by_flow(&whole.0), by_flow(&single.0));
        prop_assert!(a == b, "whole bursts {:?}\none at a time {:?}", shapes(&a), shapes(&b));
    }
}

/// A flow, as `by_flow` files it: family, addresses, ports.
type FlowId = (bool, [u8; 16], [u8; 16], u16, u16);

/// What left, flow by flow, each flow's frames byte for byte in the order they left. Within a
/// burst, frames the gateway passes untouched may leave after another flow's caravan rather
/// than before it (they wait with the merge engine's gathered segments); a flow's own order is
/// what a receiver sees, and what must not change.
fn by_flow(frames: &[Vec<u8>]) -> BTreeMap<Option<FlowId>, Vec<Vec<u8>>> {
    let mut flows: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for f in frames {
        // A flow's TCP and UDP frames share its order here.
        let key = wire::flow_of(f, f.len()).map(|k| (k.v6, k.src, k.dst, k.sport, k.dport));
        flows.entry(key).or_default().push(f.clone());
    }
    flows
}

/// A flow's frames as (length, caravan or not).
type Shapes = Vec<(usize, bool)>;

/// Each flow's frames as (length, caravan or not): enough to see how two runs differ.
fn shapes(flows: &BTreeMap<Option<FlowId>, Vec<Vec<u8>>>) -> Vec<(Option<u16>, Shapes)> {
    flows
        .iter()
        .map(|(k, v)| {
            (
                k.map(|k| k.3),
                v.iter().map(|f| (f.len(), is_caravan(f))).collect(),
            )
        })
        .collect()
}

/// A fixed mix exercises what the property names: caravans built by the burst path, a full
/// caravan starting the flow's next, datagrams that do not repeat the caravan's headers taken
/// through the general path.
#[test]
fn runs_of_datagrams_fill_caravans_and_start_the_next() {
    let mut bursts = Vec::new();
    for round in 0..8u8 {
        let mut burst = Vec::new();
        for flow in 0..4u8 {
            for k in 0..5u8 {
                let kind = if k == 2 && round % 3 == flow % 3 {
                    Kind::Ttl63
                } else {
                    Kind::Plain
                };
                burst.push(frame(flow, kind, 1400, round * 16 + k));
            }
        }
        bursts.push(burst);
    }
    let whole = run(&mut common::pipeline_with("", ""), &bursts, true);
    let single = run(&mut common::pipeline_with("", ""), &bursts, false);
    assert_eq!(whole.1, single.1);
    assert_eq!(by_flow(&whole.0), by_flow(&single.0));
    let c = &whole.1;
    // 160 datagrams of 1,400 B; a 9,000 B caravan takes six of them.
    assert_eq!(c.datagrams_packed + c.unwrapped_single, 160, "{c:?}");
    assert!(c.caravans_built >= 160 / 6, "{c:?}");
    let caravans = whole.0.iter().filter(|f| is_caravan(f)).count() as u64;
    assert_eq!(caravans, c.caravans_built);
}

/// A datagram above the iMTU, of a flow whose caravan is open, is handled as a router would
/// (fragmented, or dropped and answered), exactly as when it comes alone, never packed or
/// passed whole; in both families.
#[test]
fn an_oversize_datagram_of_an_open_caravan_is_routed_as_when_alone() {
    for flow in [0u8, 1] {
        let mut burst: Vec<Vec<u8>> = (0..3).map(|k| frame(flow, Kind::Plain, 1000, k)).collect();
        burst.push(frame(flow, Kind::Plain, 9_100, 9));
        burst.push(frame(flow, Kind::Plain, 1000, 10));
        let bursts = [burst];
        let whole = run(&mut common::pipeline_with("", ""), &bursts, true);
        let single = run(&mut common::pipeline_with("", ""), &bursts, false);
        assert_eq!(whole.1, single.1, "flow {flow}");
        assert_eq!(by_flow(&whole.0), by_flow(&single.0), "flow {flow}");
        assert!(
            whole
                .0
                .iter()
                .all(|f| f.len() <= 9_000 + 14 || is_caravan(f)),
            "flow {flow}: nothing above the iMTU went inside"
        );
    }
}

fn is_caravan(frame: &[u8]) -> bool {
    pxio::caravan::is_caravan(frame, frame.len(), pxio::caravan::DEFAULT_DSCP)
}

/// More flows than places for open caravans: each new flow's datagram makes the caravan opened
/// first leave early, whole; nothing is lost or duplicated, and the early departures are
/// counted.
#[test]
fn a_new_flow_with_every_place_taken_sends_the_oldest_caravan_on() {
    let mut px = common::pipeline_with("", "");
    let pool = HeapPool::new(8192);
    let mut out = Vec::new();
    let udp = |flow: u16, n: u8| {
        let ip = wire::IpRepr::V4(wire::Ipv4Repr::new(
            [198, 18, (flow >> 8) as u8, flow as u8],
            [198, 51, 100, 2],
        ));
        let udp = wire::UdpRepr {
            src_port: 20_000,
            dst_port: 7000,
        };
        wire::udp_frame(common::FROM_OUTSIDE, ip, udp, &[n; 100]).unwrap()
    };
    // Two datagrams for each of 1,500 flows, all within one timeout.
    let flows = 1500u16;
    for flow in 0..flows {
        let pkts = vec![pool.packet(&udp(flow, 1)), pool.packet(&udp(flow, 2))];
        px.inbound_burst(pkts, 0, &mut out);
    }
    let early = px.report().caravan.closed_early;
    assert!(early >= u64::from(flows) - 1024, "closed early: {early}");
    px.flush(TIMEOUT_NS, &mut out);
    let c = px.report().caravan;
    assert_eq!(c.caravans_built, u64::from(flows), "{c:?}");
    assert_eq!(c.datagrams_packed, 2 * u64::from(flows), "{c:?}");
    // Each caravan whole: two datagrams of its own flow, in the order they opened.
    let cfg = pxio::caravan::CaravanConfig::default();
    let firsts: Vec<u16> = out
        .iter()
        .map(|p| {
            let (h, count) = pxio::caravan::parse(p, &cfg).expect("a caravan");
            assert_eq!(count, 2);
            u16::from_be_bytes([h.key.src[2], h.key.src[3]])
        })
        .collect();
    assert_eq!(firsts, (0..flows).collect::<Vec<_>>());
    drop(out);
    assert_eq!(pool.in_use(), 0, "nothing leaked");
}
