//! The NF-facing `Pxio` API with an injected clock, on heap buffers: it runs without DPDK
//! (`cargo test -p pxio --no-default-features`). Receive with metadata, per-flow opt-in, a
//! transmit queue that keeps what the sink did not take, typed split errors, one checksum-offload
//! switch, and every refused configuration.

mod common;

use std::collections::VecDeque;

use proptest::prelude::*;
use pxio::merge::{DelayConfig, MergeConfig};
use pxio::split::{SplitError, SplitOffloads};
use pxio::{
    HeapBuf, HeapPool, ManualClock, MergeFilter, PacketBuf, PxioBuilder, PxioError, RxPacket,
    TxSink,
};

fn flow(v6: bool, id: u8, sport: u16) -> common::FlowSpec {
    common::FlowSpec {
        v6,
        id,
        sport,
        dport: 80,
        isn: 1000,
        ack: 1,
        df: true,
        ttl: 64,
        ..common::FlowSpec::default()
    }
}

/// `n` back-to-back segments of `mss` payload bytes of `fl` (see [`common::segment_frames`]).
fn segments(pool: &HeapPool, fl: &common::FlowSpec, n: u32, mss: usize) -> Vec<HeapBuf> {
    common::segment_frames(fl, n, mss)
        .iter()
        .map(|f| pool.packet(f))
        .collect()
}

/// A sink that takes at most `per_call` packets each time, like a driver with a full ring.
struct Slow {
    per_call: usize,
    got: Vec<HeapBuf>,
}

impl TxSink<HeapBuf> for Slow {
    fn send(&mut self, queue: &mut VecDeque<HeapBuf>) -> usize {
        let n = self.per_call.min(queue.len());
        self.got.extend(queue.drain(..n));
        n
    }
}

#[test]
fn the_nf_api_merges_delays_and_splits_with_an_injected_clock() {
    let pool = HeapPool::new(256);
    let clock = ManualClock::new(1_000);
    let mut px = PxioBuilder::new()
        .merge(MergeConfig {
            delay: DelayConfig {
                rate_threshold_bps: 1.0,
                yield_bypass: 1.0,
                max_window_ns: 20_000,
                ..DelayConfig::default()
            },
            ..MergeConfig::default()
        })
        .build::<HeapBuf, _>(HeapPool::new(256), &clock)
        .unwrap();
    let fl = flow(false, 1, 2001);
    let mut out = Vec::new();
    // Three segments: held as one incomplete tail item, waiting for its window.
    px.rx(segments(&pool, &fl, 3, 1448), &mut out);
    assert!(out.is_empty(), "the tail item waits");
    assert_eq!(px.rx_stats().held_items, 1);
    clock.advance(5_000);
    px.poll(&mut out);
    assert!(out.is_empty(), "still inside its window");
    clock.advance(20_000);
    px.poll(&mut out);
    assert_eq!(out.len(), 1, "released after the window");
    assert_eq!(out[0].len(), 14 + 52 + 3 * 1448);
    let s = px.rx_stats();
    assert_eq!((s.packets_in, s.packets_out, s.held_items), (3, 1, 0));
    assert!(
        s.delay_ns.mean() >= 20_000.0,
        "the wait is counted as added delay"
    );
    // The merged packet goes back out to a 1500 B next hop as three segments.
    let merged = out.pop().unwrap();
    assert_eq!(px.tx(merged), Ok(3));
    assert_eq!(px.tx_stats().split, 1);
    let mut wire = Vec::new();
    assert_eq!(px.flush_tx(&mut wire), 3);
    drop((out, wire, px));
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn tx_keeps_what_the_sink_did_not_take_in_order_and_counts_what_it_drops() {
    let pool = HeapPool::new(256);
    let mut px = PxioBuilder::new()
        .tx_queue_limit(10)
        .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
        .unwrap();
    // Twelve single packets (no split needed): ten fit the queue, two are dropped and counted.
    let fl = flow(false, 2, 3000);
    let pkts = segments(&pool, &fl, 12, 1000);
    let sent_bytes: Vec<Vec<u8>> = pkts.iter().map(|p| p.to_vec()).collect();
    for p in pkts {
        assert_eq!(px.tx(p), Ok(1));
    }
    assert_eq!(px.tx_pending(), 10);
    assert_eq!(px.tx_stats().queue_drops, 2);
    let mut slow = Slow {
        per_call: 4,
        got: Vec::new(),
    };
    assert_eq!(px.flush_tx(&mut slow), 4);
    assert_eq!(px.tx_pending(), 6, "what the sink left is kept");
    assert_eq!(px.flush_tx(&mut slow), 4);
    assert_eq!(px.flush_tx(&mut slow), 2);
    assert_eq!(px.tx_pending(), 0);
    let got: Vec<Vec<u8>> = slow.got.iter().map(|p| p.to_vec()).collect();
    assert_eq!(got, sent_bytes[..10], "nothing reordered, nothing lost");
    assert_eq!(px.tx_stats().sent, 10);
    drop((slow, px));
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn tx_reports_split_errors_and_drops_the_packet() {
    let pool = HeapPool::new(256);
    let mut px = PxioBuilder::new()
        .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
        .unwrap();
    for v6 in [false, true] {
        let fl = flow(v6, 3, 4000);
        let mut merged = Vec::new();
        px.rx(segments(&pool, &fl, 4, 1448), &mut merged);
        assert_eq!(merged.len(), 1);
        let headers = fl.l3_l4_len() as u16;
        let got = px.tx_to(merged.pop().unwrap(), headers);
        assert_eq!(
            got,
            Err(SplitError::MtuTooSmall {
                mtu: headers,
                headers
            })
        );
        // A payload byte corrupted after merging: refused, not re-checksummed.
        px.rx(segments(&pool, &fl, 4, 1448), &mut merged);
        let bytes = merged.pop().unwrap().to_vec();
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 0x40;
        assert_eq!(px.tx(pool.packet(&bad)), Err(SplitError::BadChecksum));
    }
    assert_eq!(px.tx_stats().dropped, 4);
    assert_eq!(px.tx_pending(), 0);
    drop(px);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn one_switch_decides_checksum_offload_for_merge_and_split() {
    let on = PxioBuilder::new()
        .merge(MergeConfig {
            checksum_offload: false,
            ..MergeConfig::default()
        })
        .offloads(SplitOffloads {
            tso: false,
            checksum: true,
        })
        .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
        .unwrap();
    assert!(on.merge_config().checksum_offload);
    assert!(on.offloads().checksum);
    let off = PxioBuilder::new()
        .merge(MergeConfig {
            checksum_offload: true,
            ..MergeConfig::default()
        })
        .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
        .unwrap();
    assert!(!off.merge_config().checksum_offload);
}

#[test]
fn rx_meta_hands_out_headers_and_the_original_segment_size() {
    for (v6, mss) in [(false, 1448), (true, 1448), (false, 1348), (true, 3948)] {
        let pool = HeapPool::new(256);
        let mut px = PxioBuilder::new()
            .imtu(9000)
            .delay(false)
            .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
            .unwrap();
        let fl = flow(v6, 4, 5000);
        let n = (8000 / mss) as u32;
        let input = segments(&pool, &fl, n, mss);
        let stream: Vec<u8> = input
            .iter()
            .flat_map(|p| p.to_vec()[14 + fl.l3_l4_len()..].to_vec())
            .collect();
        let mut got: Vec<RxPacket<HeapBuf>> = Vec::new();
        px.rx_meta(input, &mut got);
        assert_eq!(got.len(), 1, "v6 {v6} mss {mss}: merged into one");
        let RxPacket { pkt, meta } = got.pop().unwrap();
        let meta = meta.unwrap();
        assert_eq!(meta.hdr.v6, v6);
        assert_eq!(meta.hdr.l2_len, 14);
        assert_eq!(
            usize::from(meta.hdr.l3_len + meta.hdr.l4_len),
            fl.l3_l4_len()
        );
        assert_eq!(usize::from(meta.hdr.payload_len), n as usize * mss);
        assert_eq!((meta.key().sport, meta.key().dport), (5000, 80));
        assert_eq!(usize::from(meta.seg_size), mss);
        assert_eq!(Some(meta), px.meta_of(&pkt));
        // Splitting to the original size gives back the sender's segments.
        assert_eq!(px.tx_to(pkt, meta.seg_mtu()), Ok(n as usize));
        let mut wire: Vec<HeapBuf> = Vec::new();
        px.flush_tx(&mut wire);
        let out: Vec<u8> = wire
            .iter()
            .flat_map(|p| {
                assert_eq!(p.len(), 14 + fl.l3_l4_len() + mss);
                p.to_vec()[14 + fl.l3_l4_len()..].to_vec()
            })
            .collect();
        assert_eq!(out, stream);
        drop((wire, px));
        assert_eq!(pool.in_use(), 0);
    }
}

#[test]
fn merge_only_the_selected_flows_others_pass_untouched() {
    let pool = HeapPool::new(256);
    for filter in [
        MergeFilter::Ports(vec![6000]),
        MergeFilter::Custom(|k| k.sport == 6000),
    ] {
        let mut px = PxioBuilder::new()
            .delay(false)
            .merge_only(filter)
            .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
            .unwrap();
        for v6 in [false, true] {
            let chosen = segments(&pool, &flow(v6, 5, 6000), 5, 1448);
            let other = segments(&pool, &flow(v6, 6, 6001), 5, 1448);
            let other_bytes: Vec<Vec<u8>> = other.iter().map(|p| p.to_vec()).collect();
            let mut out = Vec::new();
            px.rx(chosen.into_iter().chain(other), &mut out);
            // The other five pass at once, as they came; the chosen flow becomes one packet.
            assert_eq!(out.len(), 6, "v6 {v6}");
            let passed: Vec<Vec<u8>> = out[..5].iter().map(|p| p.to_vec()).collect();
            assert!(
                passed == other_bytes,
                "v6 {v6}: the unselected flow was changed"
            );
            assert!(out[5].len() > 5 * 1448);
        }
    }
    let nets = MergeFilter::Prefixes(vec![("10.0.0.0".parse().unwrap(), 8)]);
    assert!(format!("{nets:?}").contains("Prefixes"));
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn absurd_merge_settings_are_refused_not_allocated() {
    let build = |merge: MergeConfig| {
        PxioBuilder::new()
            .merge(merge)
            .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
            .map(drop)
    };
    let refused = |merge: MergeConfig| match build(merge) {
        Err(PxioError::Merge(e)) => e.key,
        other => panic!("accepted: {other:?}"),
    };
    let d = MergeConfig::default;
    assert_eq!(
        refused(MergeConfig {
            max_items: 4_000_000_000,
            ..d()
        }),
        "max_items"
    );
    assert_eq!(
        refused(MergeConfig {
            max_items: 0,
            ..d()
        }),
        "max_items"
    );
    assert_eq!(refused(MergeConfig { imtu: 1279, ..d() }), "imtu");
    assert_eq!(
        refused(MergeConfig {
            flow_capacity: 0,
            ..d()
        }),
        "flow_capacity"
    );
    assert_eq!(
        refused(MergeConfig {
            flow_capacity: 1 << 25,
            ..d()
        }),
        "flow_capacity"
    );
    assert_eq!(
        refused(MergeConfig {
            max_items_per_flow: 0,
            ..d()
        }),
        "max_items_per_flow"
    );
    assert_eq!(refused(MergeConfig { max_segs: 1, ..d() }), "max_segs");
    let delay = |f: fn(&mut DelayConfig)| {
        let mut c = d();
        f(&mut c.delay);
        c
    };
    assert_eq!(refused(delay(|x| x.quantile = 1.0)), "delay.quantile");
    assert_eq!(refused(delay(|x| x.quantile = f64::NAN)), "delay.quantile");
    assert_eq!(
        refused(delay(|x| x.yield_bypass = 1.5)),
        "delay.yield_bypass"
    );
    assert_eq!(
        refused(delay(|x| x.rate_threshold_bps = -1.0)),
        "delay.rate_threshold_bps"
    );
    assert_eq!(
        refused(delay(|x| x.max_window_ns = u64::MAX)),
        "delay.max_window_ns"
    );
    assert_eq!(refused(delay(|x| x.rate_tau_ns = 0)), "delay.rate_tau_ns");
    assert!(build(MergeConfig {
        max_items: 1 << 22,
        ..d()
    })
    .is_ok());
}

fn arb_merge_config() -> impl Strategy<Value = MergeConfig> {
    (
        (
            any::<u16>(),
            prop_oneof![
                0usize..100_000,
                Just(1 << 24),
                Just(1 << 25),
                Just(usize::MAX)
            ],
            any::<u8>(),
            prop_oneof![
                0usize..200_000,
                Just(1 << 22),
                Just(4_000_000_000),
                Just(usize::MAX)
            ],
            any::<u16>(),
            any::<bool>(),
        ),
        (
            any::<bool>(),
            prop_oneof![any::<f64>(), 0.0..1e11, Just(f64::INFINITY)],
            prop_oneof![any::<f64>(), 0.0..=1.0],
            prop_oneof![any::<f64>(), 0.0..=1.0, Just(1e-300), Just(1.0 - 1e-16)],
            prop_oneof![any::<u64>(), 0u64..2_000_000_000],
            prop_oneof![any::<u64>(), 0u64..2_000_000_000],
        ),
        prop_oneof![Just(0u16), any::<u16>()],
    )
        .prop_map(
            |((imtu, flows, ipf, items, segs, csum), (en, rate, yb, q, win, tau), tso)| {
                MergeConfig {
                    imtu,
                    flow_capacity: flows,
                    max_items_per_flow: ipf,
                    max_items: items,
                    max_segs: segs,
                    checksum_offload: csum,
                    tso_max_len: tso,
                    delay: DelayConfig {
                        enabled: en,
                        rate_threshold_bps: rate,
                        yield_bypass: yb,
                        quantile: q,
                        max_window_ns: win,
                        rate_tau_ns: tau,
                    },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any configuration is either refused with a typed error, or the engine runs: packets of
    /// two flows (IPv4 and IPv6) go in, every payload byte comes out, nothing leaks.
    #[test]
    fn any_config_is_refused_or_runs(merge in arb_merge_config(), tx_mtu in any::<u16>()) {
        let pool = HeapPool::new(256);
        let clock = ManualClock::new(1);
        let built = PxioBuilder::new()
            .merge(merge.clone())
            .tx_mtu(tx_mtu)
            .build::<HeapBuf, _>(HeapPool::new(256), &clock);
        // The engine runs `merge` with its `checksum_offload` taken from the offloads the
        // builder was given (none here): that is the configuration its verdict is about.
        let merge = MergeConfig { checksum_offload: SplitOffloads::default().checksum, ..merge };
        let mut px = match built {
            Err(e) => {
                // Refused: the same verdict as validate(), with a message naming the setting.
                prop_assert!(!e.to_string().is_empty());
                prop_assert!(merge.validate().is_err() || tx_mtu < 1280);
                return Ok(());
            }
            Ok(px) => px,
        };
        prop_assert!(merge.validate().is_ok());
        let (a, b) = (flow(false, 7, 7000), flow(true, 8, 7001));
        let input: Vec<HeapBuf> = segments(&pool, &a, 6, 1200)
            .into_iter()
            .zip(segments(&pool, &b, 6, 1200))
            .flat_map(|(x, y)| [x, y])
            .collect();
        let mut out = Vec::new();
        px.rx(input, &mut out);
        clock.advance(2_000_000_000);
        px.poll(&mut out);
        px.flush(&mut out);
        let payload: usize = out.iter().map(|p| p.len() - 14 - 52 - usize::from(p.head()[12] == 0x86) * 20).sum();
        prop_assert_eq!(payload, 12 * 1200);
        for p in out {
            let _ = px.tx(p);
        }
        let mut wire: Vec<HeapBuf> = Vec::new();
        px.flush_tx(&mut wire);
        prop_assert_eq!(px.tx_stats().dropped, 0);
        drop((wire, px));
        prop_assert_eq!(pool.in_use(), 0);
    }
}

/// `Pxio::rx_unified`: one call reads a worker's queues (on the simulated NIC, `pxio::rxq::sim`)
/// and merges what they held, IPv4 and IPv6 flows spread over different queues.
#[test]
fn the_unified_receive_feeds_the_merge() {
    use pxio::rxq::sim::SimulatedNic;
    use pxio::rxq::{ActiveConfig, ActiveFlowGauge, QueueLayout, UnifiedRx};
    use std::sync::Arc;
    let pool = HeapPool::new(256);
    let clock = ManualClock::new(1_000);
    let mut px = PxioBuilder::new()
        .build::<HeapBuf, _>(HeapPool::new(256), &clock)
        .unwrap();
    let nic = SimulatedNic::new("nf", 4, 1024);
    let layout = QueueLayout::new(4, 1).unwrap();
    let mut rx = UnifiedRx::new(
        &layout,
        (0..4).map(|q| nic.queue(q)).collect(),
        Arc::new(ActiveConfig::new(4)),
        Arc::new(ActiveFlowGauge::default()),
        64,
    );
    let flows: Vec<common::FlowSpec> = (0..4u8)
        .map(|id| common::FlowSpec {
            v6: id % 2 == 1,
            id,
            sport: 3000 + u16::from(id),
            dport: 80,
            isn: 1000,
            ack: 1,
            df: true,
            ttl: 64,
            ..common::FlowSpec::default()
        })
        .collect();
    for i in 0..12u32 {
        for fl in &flows {
            nic.arrive(pool.packet(&common::tcp_frame(
                fl,
                fl.isn + i * 1448,
                i as u16,
                1,
                Default::default(),
                &[fl.id; 1448],
            )));
        }
    }
    let used: Vec<_> = nic.backlog().into_iter().filter(|&n| n > 0).collect();
    assert!(
        used.len() > 1,
        "the flows spread over several queues: {used:?}"
    );
    let (mut scratch, mut out) = (Vec::new(), Vec::new());
    assert_eq!(px.rx_unified(&mut rx, &mut scratch, &mut out), 48);
    px.flush(&mut out);
    let payload: usize = out.iter().map(|p| p.len()).sum::<usize>()
        - out
            .iter()
            .map(|p| match pxio::wire::classify(p.head(), p.len()) {
                pxio::wire::Class::Tcp(h) => h.hdr_len(),
                other => panic!("{other:?}"),
            })
            .sum::<usize>();
    assert_eq!(payload, 48 * 1448, "every payload byte came out");
    assert!(
        out.len() <= 4 * 3,
        "merged: {} packets out of 48",
        out.len()
    );
    assert!(out.iter().all(|p| p.len() <= 14 + 9000));
}

/// Frames out of `tx` for `n` back-to-back full segments of one flow whose segments fill
/// `tx_mtu`, merged with or without iMTU alignment; checks the stream comes out intact.
fn frames_out(v6: bool, tx_mtu: u16, n: u32, align: bool) -> (usize, u16) {
    let pool = HeapPool::new(256);
    let headers: u16 = if v6 { 72 } else { 52 }; // the test frames carry TCP timestamps
    let mss = usize::from(tx_mtu - headers);
    let mut b = PxioBuilder::new().tx_mtu(tx_mtu).delay(false);
    if align {
        b = b.align_imtu(headers);
    }
    let imtu = b.config().effective_imtu();
    let mut px = b
        .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
        .unwrap();
    assert_eq!(px.merge_config().imtu, imtu);
    let fl = flow(v6, 7, 3001);
    let mut merged = Vec::new();
    px.rx(segments(&pool, &fl, n, mss), &mut merged);
    px.flush(&mut merged);
    assert!(merged.len() < n as usize, "merged");
    for m in merged {
        px.tx(m).unwrap();
    }
    let mut wire: Vec<HeapBuf> = Vec::new();
    px.flush_tx(&mut wire);
    let l2l3l4 = 14 + usize::from(headers);
    let stream: Vec<u8> = wire
        .iter()
        .flat_map(|p| p.to_vec()[l2l3l4..].to_vec())
        .collect();
    let expected: Vec<u8> = (0..n as usize * mss).map(|k| k as u8).collect();
    assert_eq!(stream, expected, "the stream is intact");
    assert!(wire.iter().all(|p| p.len() - 14 <= usize::from(tx_mtu)));
    let frames = wire.len();
    drop((wire, px));
    assert_eq!(pool.in_use(), 0);
    (frames, imtu)
}

#[test]
fn an_aligned_imtu_splits_back_into_full_segments_only() {
    for v6 in [false, true] {
        for tx_mtu in [1500u16, 1400, 4000] {
            let (plain, imtu) = frames_out(v6, tx_mtu, 120, false);
            let (aligned, aimtu) = frames_out(v6, tx_mtu, 120, true);
            assert_eq!(imtu, 9000);
            let h = if v6 { 72 } else { 52 };
            assert_eq!((aimtu - h) % (tx_mtu - h), 0, "whole segments");
            assert!(
                aimtu <= 9000 && aimtu + (tx_mtu - h) > 9000,
                "the most that fit"
            );
            assert_eq!(
                aligned, 120,
                "v6 {v6}, tx_mtu {tx_mtu}: one frame out per frame in"
            );
            assert!(
                plain > 120,
                "v6 {v6}, tx_mtu {tx_mtu}: unaligned cuts add pieces"
            );
        }
    }
    assert_eq!(
        PxioBuilder::new().align_imtu(40).config().effective_imtu(),
        8800
    );
    assert_eq!(
        PxioBuilder::new()
            .imtu(1400)
            .align_imtu(40)
            .config()
            .effective_imtu(),
        1400,
        "an iMTU below the TX MTU is left alone"
    );
    for bad in [0u16, 39, 121, u16::MAX] {
        let r = PxioBuilder::new()
            .align_imtu(bad)
            .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0));
        assert!(matches!(r, Err(PxioError::AlignImtu(h)) if h == bad));
    }
}

/// A merged packet whose checksum the merger computed (over bytes it verified) is marked good,
/// so the split does not verify it again; with checksum offload its field is only the NIC's
/// seed, and it carries no verdict.
#[test]
fn merged_packets_say_whether_their_checksum_can_be_trusted() {
    for (offload, verdict) in [(false, Some(true)), (true, None)] {
        for v6 in [false, true] {
            let pool = HeapPool::new(256);
            let mut px = PxioBuilder::new()
                .delay(false)
                .offloads(SplitOffloads {
                    tso: false,
                    checksum: offload,
                })
                .build::<HeapBuf, _>(HeapPool::new(256), ManualClock::new(0))
                .unwrap();
            let mut out = Vec::new();
            px.rx(segments(&pool, &flow(v6, 9, 9000), 5, 1448), &mut out);
            px.flush(&mut out);
            assert_eq!(out.len(), 1, "v6 {v6}: five segments merged into one");
            assert_eq!(
                out[0].l4_csum_verdict(),
                verdict,
                "v6 {v6}, offload {offload}"
            );
        }
    }
}
