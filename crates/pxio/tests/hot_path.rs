//! The hot path allocates nothing: after construction, merging real mbufs (append, prepend,
//! cuts, delays, polls) makes no heap allocation. Proven with allocation-counter's counting global allocator.

mod common;

use common::simple_flow as flow;
use dpdk::testing::{assert_no_leaks, pool};
use dpdk::Mbuf;
use pxio::merge::{DelayConfig, MergeConfig, Merger};

#[test]
fn merging_real_mbufs_allocates_nothing() {
    merge_real_mbufs_without_allocating(false);
}

/// The same with what a NIC gives (the RSS hash and the checksum verdicts): the fast path.
#[test]
fn the_fast_path_allocates_nothing() {
    merge_real_mbufs_without_allocating(true);
}

fn merge_real_mbufs_without_allocating(nic: bool) {
    let rx = pool(8192, 2048 + 128);
    let headers = pool(1024, 256);
    let cfg = MergeConfig {
        delay: DelayConfig {
            rate_threshold_bps: 1.0,
            yield_bypass: 1.0,
            ..DelayConfig::default()
        },
        ..MergeConfig::default()
    };
    let mut merger = Merger::<Mbuf>::new(cfg, headers.clone()).unwrap();
    // 8 interleaved flows, 40 segments each, with some reordering: appends, prepends, cuts.
    let mut frames = Vec::new();
    for i in 0..40u32 {
        for f in 1..=8u8 {
            let fl = flow(f);
            let seq = fl.isn + i * 1448;
            frames.push(common::tcp_frame(
                &fl,
                seq,
                i as u16,
                1,
                Default::default(),
                &[f; 1448],
            ));
        }
    }
    for pair in frames.chunks_mut(16).step_by(3) {
        pair.swap(0, 8); // same flow, adjacent segments swapped
    }
    let mbufs: Vec<Mbuf> = frames
        .iter()
        .map(|f| {
            let mut m = rx.alloc().unwrap();
            m.extend_from_slice(f).unwrap();
            if nic {
                m.mark_rx_checksums_good();
                // One hash per flow: the flow's id byte is the payload's.
                m.set_rss_hash(u32::from(f[f.len() - 1]));
            }
            m
        })
        .collect();
    let mut out: Vec<Mbuf> = Vec::with_capacity(frames.len());
    let mut bursts: Vec<Vec<Mbuf>> = Vec::new();
    let mut it = mbufs.into_iter();
    loop {
        let b: Vec<Mbuf> = it.by_ref().take(32).collect();
        if b.is_empty() {
            break;
        }
        bursts.push(b);
    }
    let mut now = 1_000u64;
    let info = allocation_counter::measure(|| {
        for burst in bursts.iter_mut() {
            now += 3_000;
            merger.poll(now, &mut out);
            merger.rx_burst(burst.drain(..), now, &mut out);
        }
        merger.poll(now + 1_000_000, &mut out);
    });
    let allocs = info.count_total;
    let s = merger.stats();
    assert!(
        s.merges > 200 && s.cuts > 0,
        "the run exercised merging: {s:?}"
    );
    assert_eq!(
        s.fast_merges > 0,
        nic,
        "the fast path ran exactly when the NIC gave its hash"
    );
    assert_eq!(allocs, 0, "heap allocations on the hot path");
    merger.flush_all(now, &mut out);
    drop(out);
    drop(merger);
    assert_no_leaks(&rx);
    assert_no_leaks(&headers);
}

/// A ring that hands out packets made beforehand, so only the unified receive itself can
/// allocate.
struct Prepared(Vec<pxio::HeapBuf>);

impl pxio::rxq::RxRing for Prepared {
    type Pkt = pxio::HeapBuf;
    fn rx_into(&mut self, out: &mut Vec<pxio::HeapBuf>, max: usize) -> usize {
        let n = self.0.len().min(max);
        let at = self.0.len() - n;
        out.extend(self.0.drain(at..));
        n
    }
}

#[test]
fn the_unified_receive_allocates_nothing() {
    use pxio::rxq::{ActiveConfig, ActiveFlowGauge, QueueLayout, UnifiedRx};
    use std::sync::Arc;
    let layout = QueueLayout::new(8, 2).unwrap();
    let heap = pxio::HeapPool::new(64);
    let rings: Vec<Prepared> = (0..4u32)
        .map(|q| {
            Prepared(
                (0..64u32)
                    .map(|i| {
                        pxio::rxq::sim::flow_frame(&heap, q * 100 + i % 20, i % 2 == 0, i, 100)
                    })
                    .collect(),
            )
        })
        .collect();
    let config = Arc::new(ActiveConfig::new(8));
    let gauge = Arc::new(ActiveFlowGauge::default());
    let mut rx = UnifiedRx::new(&layout, rings, config.clone(), gauge.clone(), 16);
    let mut out = Vec::with_capacity(4 * 64);
    let info = allocation_counter::measure(|| {
        for _ in 0..3 {
            rx.rx_burst(&mut out);
        }
        config.publish(2); // shrink: one queue active, three draining
        for _ in 0..20 {
            rx.rx_burst(&mut out);
        }
    });
    assert_eq!(out.len(), 4 * 64, "every prepared packet was read");
    assert_eq!(
        rx.stats().polled_queues,
        1,
        "the drained queues are no longer polled"
    );
    assert!(gauge.take_average() > 1.0, "flows were counted");
    assert_eq!(
        info.count_total, 0,
        "heap allocations in the unified receive"
    );
}
