//! An outside receiver's ACKs, taken from a whole RX burst, skip the general parse: a bare ACK of
//! a connection the worker saw recently is recognised by its bytes, its acknowledgement applied
//! to the connection in the slot remembered for it, and passed on. That shortcut must change
//! nothing a user can see: the same frames inside, in the same order per flow, the same counters,
//! and the same answers to the ICMP errors that quote the inside host's segments (RFC 5927: an
//! error is believed only when the sequence number it quotes is still in flight, between the
//! highest acknowledgement from outside and what the inside host sent), as when every frame is
//! taken one at a time through the general path.

mod common;

use std::collections::BTreeMap;

use etherparse::{IpHeaders, IpNumber, Ipv4Header, PacketBuilder};
use proptest::prelude::*;
use pxgw::pipeline::Pipeline;
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};

use common::hosts::{INSIDE_V4, INSIDE_V6, OUTSIDE_V4, OUTSIDE_V6};

const INSIDE_PORT: u16 = 443;
const OUTSIDE_ISN: u32 = 1_000_000;
const INSIDE_ISN: u32 = 7_000_000;
/// What the inside host sends at a time: 1,000 B, below every path MTU here, so nothing is
/// split and the path MTU a believed error sets shows only in the counters.
const SEND: u32 = 1000;
/// The caravan mark of the default configuration.
const MARK: u8 = pxio::caravan::DEFAULT_DSCP;

/// Connection `c` of the test: even ones IPv4, odd ones IPv6; the outside port tells them apart.
fn v6(c: u8) -> bool {
    c % 2 == 1
}

fn outside_port(c: u8) -> u16 {
    40_000 + u16::from(c)
}

/// A TCP segment of connection `c`, from outside (`inbound`) or from inside.
#[allow(clippy::too_many_arguments)]
fn segment(
    c: u8,
    inbound: bool,
    seq: u32,
    ack: Option<u32>,
    flags: Flags,
    dscp: u8,
    payload: &[u8],
) -> Vec<u8> {
    let (mac_src, mac_dst) = if inbound {
        ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
    } else {
        ([2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 1])
    };
    let eth = PacketBuilder::ethernet2(mac_src, mac_dst);
    let ip = if v6(c) {
        let (src, dst) = if inbound {
            (OUTSIDE_V6, INSIDE_V6)
        } else {
            (INSIDE_V6, OUTSIDE_V6)
        };
        eth.ipv6(src, dst, 64)
    } else {
        let (src, dst) = if inbound {
            (OUTSIDE_V4, INSIDE_V4)
        } else {
            (INSIDE_V4, OUTSIDE_V4)
        };
        let mut h = Ipv4Header::new(0, 64, IpNumber::TCP, src, dst).unwrap();
        h.dont_fragment = true;
        h.dscp = etherparse::IpDscp::try_new(dscp).unwrap();
        eth.ip(IpHeaders::Ipv4(h, Default::default()))
    };
    let (sport, dport) = if inbound {
        (outside_port(c), INSIDE_PORT)
    } else {
        (INSIDE_PORT, outside_port(c))
    };
    let mut b = ip.tcp(sport, dport, seq, 65000);
    if flags.syn {
        b = b.syn();
    }
    if flags.fin {
        b = b.fin();
    }
    if flags.rst {
        b = b.rst();
    }
    if flags.psh {
        b = b.psh();
    }
    if let Some(ack) = ack {
        b = b.ack(ack);
    }
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

#[derive(Clone, Copy, Debug, Default)]
struct Flags {
    syn: bool,
    fin: bool,
    rst: bool,
    psh: bool,
}

/// An ICMP error from a router outside quoting the inside host's segment of connection `c` at
/// `seq`: "fragmentation needed" with `mtu` (IPv4) or Packet Too Big (IPv6).
fn too_big(c: u8, seq: u32, mtu: u16) -> Vec<u8> {
    let quoted = segment(
        c,
        false,
        seq,
        Some(OUTSIDE_ISN + 1),
        Flags::default(),
        0,
        &[0; 8],
    );
    common::too_big(&quoted, v6(c), u32::from(mtu))
}

/// What the outside sends, and how it differs from a plain bare ACK.
#[derive(Clone, Copy, Debug)]
enum Outside {
    /// A bare ACK acknowledging `back` sends before what the inside host has sent (0: all of
    /// it), or, for `beyond`, that much past it (proves nothing: moves nothing).
    Ack {
        back: u8,
        beyond: bool,
        kind: AckKind,
    },
    /// Data from outside (the merge engine holds it: later ACKs go the general way).
    Data,
    /// An error quoting the inside host's segment `back` sends before its next.
    TooBig { back: u8 },
}

#[derive(Clone, Copy, Debug)]
enum AckKind {
    Plain,
    Psh,
    Fin,
    Rst,
    /// Wears the caravan mark (cleared on the general path).
    Marked,
    /// Six bytes of Ethernet padding.
    Padded,
    /// Its IPv4 header not vouched for by the NIC.
    Unvouched,
}

fn ack_kind() -> impl Strategy<Value = AckKind> {
    prop_oneof![
        10 => Just(AckKind::Plain),
        2 => Just(AckKind::Psh),
        1 => Just(AckKind::Fin),
        1 => Just(AckKind::Rst),
        1 => Just(AckKind::Marked),
        1 => Just(AckKind::Padded),
        1 => Just(AckKind::Unvouched),
    ]
}

fn outside() -> impl Strategy<Value = Outside> {
    prop_oneof![
        8 => (0u8..4, prop::bool::weighted(0.1), ack_kind())
            .prop_map(|(back, beyond, kind)| Outside::Ack { back, beyond, kind }),
        1 => Just(Outside::Data),
        2 => (0u8..6).prop_map(|back| Outside::TooBig { back }),
    ]
}

/// One step: the inside host of connection `c` sends `sends` segments, then the outside sends
/// `what` on it; `cut` ends the RX burst after it.
type Step = (u8, u8, Outside, bool);

/// The frames of each step, and whether they come from outside (with their NIC verdicts).
struct Script {
    frames: Vec<(bool, Vec<u8>, bool)>,
    /// Where an RX burst from outside ends (after frame `i`).
    cuts: Vec<bool>,
}

/// The handshakes of connections `0..conns` (the inside host opens), then `steps`.
fn script(conns: u8, steps: &[Step]) -> Script {
    let mut frames = Vec::new();
    let mut cuts = Vec::new();
    let mut push = |frames: &mut Vec<_>, inbound, f, vouched, cut| {
        frames.push((inbound, f, vouched));
        cuts.push(cut);
    };
    let none = Flags::default();
    for c in 0..conns {
        let syn = Flags { syn: true, ..none };
        push(
            &mut frames,
            false,
            segment(c, false, INSIDE_ISN, None, syn, 0, &[]),
            true,
            true,
        );
        let syn_ack = segment(c, true, OUTSIDE_ISN, Some(INSIDE_ISN + 1), syn, 0, &[]);
        push(&mut frames, true, syn_ack, true, true);
        let ack = segment(
            c,
            false,
            INSIDE_ISN + 1,
            Some(OUTSIDE_ISN + 1),
            none,
            0,
            &[],
        );
        push(&mut frames, false, ack, true, true);
    }
    let mut sent = vec![INSIDE_ISN + 1; usize::from(conns)];
    let mut outside_seq = vec![OUTSIDE_ISN + 1; usize::from(conns)];
    for &(c, sends, what, cut) in steps {
        let c = c % conns;
        let ci = usize::from(c);
        for _ in 0..sends {
            let data = segment(
                c,
                false,
                sent[ci],
                Some(outside_seq[ci]),
                none,
                0,
                &[0x5a; SEND as usize],
            );
            push(&mut frames, false, data, true, true);
            sent[ci] = sent[ci].wrapping_add(SEND);
        }
        let frame = match what {
            Outside::Ack { back, beyond, kind } => {
                let ack = if beyond {
                    sent[ci].wrapping_add(u32::from(back) * SEND + 1)
                } else {
                    sent[ci].wrapping_sub(u32::from(back) * SEND)
                };
                let flags = Flags {
                    psh: matches!(kind, AckKind::Psh),
                    fin: matches!(kind, AckKind::Fin),
                    rst: matches!(kind, AckKind::Rst),
                    ..none
                };
                let dscp = if matches!(kind, AckKind::Marked) {
                    MARK
                } else {
                    0
                };
                let mut f = segment(c, true, outside_seq[ci], Some(ack), flags, dscp, &[]);
                if matches!(kind, AckKind::Padded) {
                    f.extend_from_slice(&[0; 6]);
                }
                if matches!(kind, AckKind::Fin) {
                    outside_seq[ci] = outside_seq[ci].wrapping_add(1);
                }
                (f, !matches!(kind, AckKind::Unvouched))
            }
            Outside::Data => {
                let f = segment(
                    c,
                    true,
                    outside_seq[ci],
                    Some(sent[ci]),
                    none,
                    0,
                    &[7; 1448],
                );
                outside_seq[ci] = outside_seq[ci].wrapping_add(1448);
                (f, true)
            }
            Outside::TooBig { back } => {
                let seq = sent[ci].wrapping_sub(u32::from(back) * SEND);
                (too_big(c, seq, if v6(c) { 1300 } else { 1000 }), true)
            }
        };
        push(&mut frames, true, frame.0, frame.1, cut);
    }
    Script { frames, cuts }
}

/// A flow's ports, as the frames inside are filed by.
type Ports = (u16, u16);

/// What a run showed: what went inside and outside, by flow, byte for byte in order, and the
/// counters a user reads.
#[derive(Debug, PartialEq)]
struct Seen {
    inside: BTreeMap<Option<Ports>, Vec<Vec<u8>>>,
    outside: Vec<Vec<u8>>,
    counters: String,
}

/// A frame as the NIC hands it over: with the RSS hash and its checksum verdicts.
fn received(pool: &HeapPool, frame: &[u8], vouched: bool) -> HeapBuf {
    let mut p = pool.packet(frame);
    if let Some(k) = wire::flow_of(frame, frame.len()) {
        p.set_rss_hash(Some(
            u32::from(k.sport).wrapping_mul(2_654_435_761) ^ u32::from(k.dport),
        ));
    }
    p.set_ip_csum_verdict(vouched.then_some(true));
    p.set_l4_csum_verdict(vouched.then_some(true));
    p
}

/// Plays `s` through `px`: the frames from outside as whole RX bursts (`whole`), or one at a
/// time through the general path; the inside host's frames one at a time either way. 1 µs apart.
fn run(px: &mut Pipeline<HeapBuf>, s: &Script, whole: bool) -> Seen {
    let pool = HeapPool::new(8192);
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    let mut burst = Vec::new();
    let mut now = 1_000_000;
    for (i, (inbound, frame, vouched)) in s.frames.iter().enumerate() {
        now += 1_000;
        if !inbound {
            px.outbound(received(&pool, frame, *vouched), now, &mut outside);
            continue;
        }
        burst.push(received(&pool, frame, *vouched));
        if s.cuts[i] || s.frames.get(i + 1).is_none_or(|f| !f.0) {
            if whole {
                px.inbound_burst(burst.drain(..), now, &mut inside);
            } else {
                for p in burst.drain(..) {
                    px.inbound(p, now, &mut inside);
                }
                px.end_of_burst(now, &mut inside);
            }
        }
    }
    px.flush(now, &mut inside);
    let mut replies = Vec::new();
    px.take_inside_replies(&mut replies);
    inside.extend(replies);
    let mut by_flow: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for f in inside.iter().map(PacketBuf::to_vec) {
        let k = wire::flow_of(&f, f.len()).map(|k| (k.sport, k.dport));
        by_flow.entry(k).or_default().push(f);
    }
    let r = px.report();
    let counters = format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        r.merge, r.router, r.drops, r.mss, r.caravan, r.connections
    );
    let seen = Seen {
        inside: by_flow,
        outside: outside.iter().map(PacketBuf::to_vec).collect(),
        counters,
    };
    drop((inside, outside));
    assert_eq!(pool.in_use(), 0, "nothing leaked");
    seen
}

/// Every flow may wait for more segments, however slow: the merge engine holds the outside's
/// data across the ACKs that follow it.
const HOLD: &str = "[merge]\nrate_threshold_gbps = 0.0\n";

fn both(s: &Script) -> (Seen, Seen) {
    let whole = run(&mut common::pipeline_with("", HOLD), s, true);
    let single = run(&mut common::pipeline_with("", HOLD), s, false);
    (whole, single)
}

/// Each flow's frames as their lengths: enough to see how two runs differ.
fn shapes(seen: &Seen) -> Vec<(Option<Ports>, Vec<usize>)> {
    seen.inside
        .iter()
        .map(|(k, v)| (*k, v.iter().map(Vec::len).collect()))
        .collect()
}

/// Whether two runs showed the same; if not, what differs, briefly.
fn differ(whole: &Seen, single: &Seen) -> Option<String> {
    (whole != single).then(|| {
        format!(
            "whole bursts: {:?}\n{}\none at a time: {:?}\n{}\nsame outside: {}",
            shapes(whole),
            whole.counters,
            shapes(single),
            single.counters,
            whole.outside == single.outside
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Any mix of the inside host's segments and the outside's ACKs (acknowledging all, some or
    /// more than was sent; with PSH, FIN or RST; marked, padded, unvouched), data and errors
    /// quoting what is in flight or no longer is, over IPv4 and IPv6 connections, in bursts of
    /// any length: the same frames, counters and verdicts on errors whole or one at a time.
    #[test]
    fn whole_bursts_of_acks_track_connections_as_one_frame_at_a_time(
        conns in 1u8..5,
        steps in prop::collection::vec((0u8..4, 0u8..3, outside(), any::<bool>()), 1..80),
    ) {
        let s = script(conns, &steps);
        let (whole, single) = both(&s);
        let diff = differ(&whole, &single);
        prop_assert!(diff.is_none(), "{}", diff.unwrap_or_default());
    }
}

/// A fixed upload, as a receiver acknowledges it in bursts: the errors quoting what the outside
/// already acknowledged are refused, those quoting what is still in flight believed, in both
/// families and either way the frames are taken.
#[test]
fn an_acknowledged_segment_is_no_longer_in_flight_after_a_burst_of_acks() {
    let mut steps: Vec<Step> = Vec::new();
    for round in 0..6u8 {
        for c in 0..2u8 {
            // Four segments out, then the outside acknowledges all but the last in a burst.
            steps.push((
                c,
                4,
                Outside::Ack {
                    back: 1,
                    beyond: false,
                    kind: AckKind::Plain,
                },
                false,
            ));
            steps.push((
                c,
                0,
                Outside::Ack {
                    back: 1,
                    beyond: false,
                    kind: AckKind::Plain,
                },
                round % 2 == 0,
            ));
        }
    }
    for c in 0..2u8 {
        // Acknowledged (two sends back is below the last ACK): refused. In flight: believed.
        steps.push((c, 0, Outside::TooBig { back: 2 }, true));
        steps.push((c, 0, Outside::TooBig { back: 1 }, true));
    }
    let s = script(2, &steps);
    let (whole, single) = both(&s);
    if let Some(diff) = differ(&whole, &single) {
        panic!("{diff}");
    }
    let mut px = common::pipeline_with("", HOLD);
    run(&mut px, &s, true);
    let r = px.report().router;
    assert_eq!((r.ptb_out_of_window, r.ptb_learned), (2, 2), "{r:?}");
}

/// An ACK that follows data of its own connection in a burst leaves after that data, which the
/// merge engine holds: the shortcut never lets it overtake.
#[test]
fn an_ack_never_overtakes_data_held_for_its_connection() {
    let ack = Outside::Ack {
        back: 0,
        beyond: false,
        kind: AckKind::Plain,
    };
    let mut steps: Vec<Step> = vec![(0, 1, ack, true)];
    for round in 0..4 {
        // A run of data the engine merges, then the outside's ACK, in one burst.
        steps.extend((0..6).map(|_| (0, 0, Outside::Data, false)));
        steps.push((0, 0, ack, round % 2 == 1));
    }
    let s = script(1, &steps);
    let (whole, single) = both(&s);
    if let Some(diff) = differ(&whole, &single) {
        panic!("{diff}");
    }
    let mut px = common::pipeline_with("", HOLD);
    let seen = run(&mut px, &s, true);
    assert!(px.report().merge.merges > 0, "the engine merged the runs");
    let sizes: Vec<usize> = seen.inside.values().flatten().map(Vec::len).collect();
    // Each run's merged data leaves before the ACK that followed it: no ACK comes right after
    // an ACK but the first (after the handshake's).
    let acks: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] < 100).collect();
    assert_eq!(acks.len(), 2 + 4, "{sizes:?}");
    assert!(
        acks.windows(2).skip(1).all(|w| w[1] > w[0] + 1),
        "an ACK overtook held data: {sizes:?}"
    );
}
