//! The NF-facing `Pxio` API with an injected clock, on heap buffers: it runs without DPDK
//! (`cargo test -p pxio --no-default-features`).

mod common;

use pxio::merge::{DelayConfig, MergeConfig};
use pxio::{HeapBuf, HeapPool, ManualClock, PacketBuf, Pxio, PxioConfig};

#[test]
fn the_nf_api_merges_delays_and_splits_with_an_injected_clock() {
    let pool = HeapPool::new(256);
    let clock = ManualClock::new(1_000);
    let cfg = PxioConfig {
        merge: MergeConfig {
            delay: DelayConfig {
                rate_threshold_bps: 1.0,
                yield_bypass: 1.0,
                max_window_ns: 20_000,
                ..DelayConfig::default()
            },
            ..MergeConfig::default()
        },
        ..PxioConfig::default()
    };
    let mut px = Pxio::<HeapBuf, &ManualClock>::new(cfg, HeapPool::new(256), &clock).unwrap();
    let fl = common::FlowSpec {
        id: 1,
        sport: 2001,
        dport: 80,
        isn: 1000,
        ack: 1,
        df: true,
        ttl: 64,
        ..common::FlowSpec::default()
    };
    let mut out = Vec::new();
    // Three segments: held as one incomplete tail item, waiting for its window.
    let burst: Vec<HeapBuf> = (0..3u32)
        .map(|i| {
            pool.packet(&common::tcp_frame(
                &fl,
                fl.isn + i * 1448,
                0,
                1,
                Default::default(),
                &[1; 1448],
            ))
        })
        .collect();
    px.rx(burst, &mut out);
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
    px.tx(merged, 1500, &mut out);
    assert_eq!(out.len(), 3);
    assert_eq!(px.tx_stats().split, 1);
    drop(out);
    drop(px);
    assert_eq!(pool.in_use(), 0);
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
    let mut px =
        Pxio::<HeapBuf, &ManualClock>::new(PxioConfig::default(), HeapPool::new(256), &clock)
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
