//! A worker splitting in software builds from the same few hundred header buffers burst after
//! burst: its per-lcore cache of the header pool ([`pxgw::ports::HEADER_POOL_CACHE`]) holds
//! what a burst takes, so what one burst returns is what the next one takes. With too small a
//! cache, DPDK's mempool flushes to its shared ring and refills from it, and the ring hands out
//! the buffers returned longest ago: the bursts walk the whole pool, every header written to a
//! buffer no cache holds. The gateway bench's outbound TCP without offloads took twice as long
//! per frame that way.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::tcp4 as tcp;
use dpdk::testing::{assert_no_leaks, eal, pool};
use dpdk::{Mbuf, Mempool};
use pxgw::ports::{header_pool, HEADER_POOL_CACHE, HEADER_POOL_SIZE};
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
    let (used, pieces) = header_buffers_used(&header_pool(eal(), "hdr_reuse").unwrap());
    assert_eq!(pieces, u64::from(BURSTS) * u64::from(FLOWS) * 7);
    assert!(
        used <= 2 * HEADER_POOL_CACHE as usize,
        "{pieces} pieces over {BURSTS} bursts were built in {used} distinct header buffers: \
         the bursts walked the pool instead of reusing what the cache held"
    );

    // The control: DPDK's old default of 256 cannot hold a burst, and the same bursts walk
    // the pool (which is what the test above would see if the cache shrank).
    let small = Mempool::new(eal(), "hdr_reuse_256", HEADER_POOL_SIZE, 256, 256).unwrap();
    let (walked, _) = header_buffers_used(&small);
    assert!(
        walked > 4 * HEADER_POOL_CACHE as usize,
        "with a cache of 256 the bursts used only {walked} distinct header buffers"
    );
}
