//! A worker splitting in software builds from the same few hundred header buffers burst after
//! burst: its per-lcore cache of the header pool ([`pxgw::ports::HEADER_POOL_CACHE`]) holds
//! what a burst takes, so what one burst returns is what the next one takes. With too small a
//! cache, DPDK's mempool flushes to its shared ring and refills from it, and the ring hands out
//! the buffers returned longest ago: the bursts walk the whole pool, every header written to a
//! buffer no cache holds. The gateway bench's outbound TCP without offloads took twice as long
//! per frame that way.
//!
//! What a cache keeps, no other worker can take: the pool grows with the workers, so that
//! however many there are, each still finds the shared part when its own cache runs dry.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::tcp4 as tcp;
use dpdk::testing::{assert_no_leaks, eal, pool};
use dpdk::{Mbuf, Mempool};
use pxgw::ports::{
    header_pool, header_pool_size, HEADER_POOL_CACHE, HEADER_POOL_CACHE_MAX, HEADER_POOL_SHARED,
};
use pxio::wire;

/// One inside segment per flow and burst: 32 segments of 8,948 B, seven pieces each.
const FLOWS: u16 = 32;
const BURSTS: u32 = 20;

/// Runs `BURSTS` bursts of inside segments through a pipeline building from `headers`, on a
/// port without offloads (every piece split in software), each burst's outputs freed before
/// the next, as a driver frees what it sent. Returns the distinct header buffers the pieces
/// were built in, and the pieces.
fn header_buffers_used(headers: &Arc<Mempool>) -> (usize, u64) {
    use wire::tcp_flags::{ACK, SYN};
    let rx = pool(1024, 9100 + 128);
    let mut px = common::mbuf_pipeline(headers);
    let mbuf = |frame: &[u8]| {
        let mut m = rx.alloc().unwrap();
        m.extend_from_slice(frame).unwrap();
        m
    };
    let mut out: Vec<Mbuf> = Vec::with_capacity(1024);
    for p in 0..FLOWS {
        let port = 40000 + p;
        px.inbound_burst([mbuf(&tcp(true, port, 999, 0, SYN, &[]))], 1, &mut out);
        px.outbound_burst(
            [mbuf(&tcp(false, port, 4999, 1000, SYN | ACK, &[]))],
            2,
            &mut out,
        );
        px.inbound_burst([mbuf(&tcp(true, port, 1000, 5000, ACK, &[]))], 3, &mut out);
    }
    out.clear();
    let payload = vec![7u8; 8948];
    let mut seen = HashSet::new();
    let mut pieces = 0u64;
    for burst in 0..BURSTS {
        let seq = 5000u32.wrapping_add(burst * 8948);
        let segments: Vec<Mbuf> = (0..FLOWS)
            .map(|p| mbuf(&tcp(false, 40000 + p, seq, 1000, ACK, &payload)))
            .collect();
        px.outbound_burst(segments, 10_000 + u64::from(burst) * 1_000, &mut out);
        pieces += out.len() as u64;
        seen.extend(out.iter().map(|m| m.as_ptr() as usize));
        out.clear();
    }
    let r = px.report();
    assert_eq!(
        r.split.segments, pieces,
        "every output was a split piece (drops: {:?})",
        r.drops
    );
    px.flush(100_000_000, &mut out);
    drop(out);
    drop(px);
    assert_no_leaks(&rx);
    assert_no_leaks(headers);
    (seen.len(), pieces)
}

#[test]
fn software_splits_build_from_the_buffers_the_last_burst_returned() {
    // A worker's thread has an lcore id, and so a cache in every pool; so does this one.
    let _lcore = eal().register_thread().unwrap();
    // Seven pieces per segment, two buffers per piece (its header, a view of its payload): 448
    // buffers a burst, within what the cache keeps.
    let (used, pieces) = header_buffers_used(&header_pool(eal(), "hdr_reuse", 1).unwrap());
    assert_eq!(pieces, u64::from(BURSTS) * u64::from(FLOWS) * 7);
    assert!(
        used <= 2 * HEADER_POOL_CACHE as usize,
        "{pieces} pieces over {BURSTS} bursts were built in {used} distinct header buffers: \
         the bursts walked the pool instead of reusing what the cache held"
    );

    // The control: DPDK's old default of 256 cannot hold a burst, and the same bursts walk
    // the pool (which is what the test above would see if the cache shrank).
    let small = Mempool::new(eal(), "hdr_reuse_256", header_pool_size(1), 256, 256).unwrap();
    let (walked, _) = header_buffers_used(&small);
    assert!(
        walked > 4 * HEADER_POOL_CACHE as usize,
        "with a cache of 256 the bursts used only {walked} distinct header buffers"
    );
}

/// Workers, each with a full cache: more than the old fixed pool of 16,383 could serve, which
/// 22 full caches would hold whole.
const MANY_WORKERS: u16 = 24;

/// Fills the caches of `workers` workers in `pool`, `HEADER_POOL_CACHE_MAX` buffers each (what
/// a burst of splits returns, the most a cache keeps), then counts the buffers a thread
/// without a cache can still take: what a worker whose own cache ran dry finds.
fn left_after_full_caches(pool: &Mempool, workers: u16) -> usize {
    // Threads the EAL gave no lcore id take from the shared ring alone, and return to it.
    let take = |n: usize| {
        std::thread::scope(|s| {
            s.spawn(|| {
                (0..n)
                    .map_while(|_| pool.alloc().ok())
                    .collect::<Vec<Mbuf>>()
            })
            .join()
            .unwrap()
        })
    };
    let mut taken = take(usize::from(workers) * HEADER_POOL_CACHE_MAX as usize);
    // Each worker frees its share into its own cache (the buffers a thread frees go to its
    // cache, whoever took them). Every worker stays registered until all have, so each has its
    // own lcore id, and so its own cache.
    let barrier = std::sync::Barrier::new(usize::from(workers));
    std::thread::scope(|s| {
        for _ in 0..workers {
            let share: Vec<Mbuf> = taken
                .drain(..taken.len().min(HEADER_POOL_CACHE_MAX as usize))
                .collect();
            let barrier = &barrier;
            s.spawn(move || {
                let _lcore = eal().register_thread().unwrap();
                drop(share);
                barrier.wait();
            });
        }
    });
    take(usize::MAX).len()
}

#[test]
fn full_caches_on_every_worker_leave_the_shared_part_to_each() {
    let workers = MANY_WORKERS;
    let headers = header_pool(eal(), "hdr_workers", workers).unwrap();
    let left = left_after_full_caches(&headers, workers);
    assert!(
        left >= HEADER_POOL_SHARED as usize,
        "with {workers} full caches a worker found {left} header buffers, fewer than the \
         {HEADER_POOL_SHARED} shared (pool of {})",
        header_pool_size(workers)
    );

    // The control: the old fixed pool of 16,383, which the same full caches hold whole.
    let fixed = Mempool::new(eal(), "hdr_fixed", 16_383, HEADER_POOL_CACHE, 256).unwrap();
    let left_fixed = left_after_full_caches(&fixed, workers);
    assert!(
        left_fixed < HEADER_POOL_SHARED as usize / 2,
        "the fixed pool left {left_fixed} header buffers behind {workers} full caches"
    );
}
