//! A worker's publication allocates nothing: the pipeline's counters written into the worker's
//! report, the load meter's figures, and the publication itself (counters, the merge delay
//! histogram, the discovered paths), as `worker.rs` does every 1024 loop iterations. Proven with
//! allocation-counter's counting global allocator; what the readers then see is checked too.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use pxgw::pmtud::DiscoveredPath;
use pxgw::publish::{channel, DELAY_EVERY_NS, MAX_PATHS};
use pxgw::stats::{LoadMeter, Report};
use pxio::wire::tcp_flags;
use pxio::{HeapBuf, HeapPool};

/// A frame of the one connection, port 50000 outside to 80 inside.
fn tcp(inbound: bool, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    common::tcp4(inbound, 50000, seq, ack, flags, payload)
}

fn path(i: u8) -> DiscoveredPath {
    DiscoveredPath {
        destination: IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)),
        pmtu: 1400 + u16::from(i),
    }
}

#[test]
fn publishing_allocates_nothing() {
    use tcp_flags::{ACK, SYN};
    let pool = HeapPool::new(256);
    let mut px = common::pipeline_with("", "");
    let mut out: Vec<HeapBuf> = Vec::new();
    // A handshake through the gateway, then a run of segments it merges (with added delay).
    px.inbound(pool.packet(&tcp(true, 999, 0, SYN, &[])), 1, &mut out);
    px.end_of_burst(1, &mut out);
    px.outbound(
        pool.packet(&tcp(false, 4999, 1000, SYN | ACK, &[])),
        2,
        &mut out,
    );
    px.inbound(pool.packet(&tcp(true, 1000, 5000, ACK, &[])), 3, &mut out);
    px.end_of_burst(3, &mut out);
    let mut seq = 1000u32;
    for i in 0..40u64 {
        px.inbound(
            pool.packet(&tcp(true, seq, 5000, ACK, &[7; 1448])),
            10 + i,
            &mut out,
        );
        seq += 1448;
    }
    px.end_of_burst(50, &mut out);
    px.flush(1_000_000, &mut out);
    out.clear();
    assert!(px.report().merge.merges > 0, "the run merged");
    assert!(
        !px.merge_delay().is_empty(),
        "the merge engine recorded delays"
    );

    let (mut publisher, snapshot) = channel();
    let mut meter = LoadMeter::new(1_000_000_000, 0);
    let mut counters = Report::default();
    let many: Vec<DiscoveredPath> = (0..100).map(path).collect();
    let mut tsc = 0u64;
    let info = allocation_counter::measure(|| {
        for round in 0..50u64 {
            // A second of loop turns, half of them busy, between publications.
            for turn in 0..100u64 {
                tsc += 10_000_000;
                meter.poll(tsc, turn % 2 == 0, 32);
            }
            px.report_into(&mut counters);
            meter.write(&mut counters.load);
            // The delay histogram is due every other round (0.1 s apart, changed in between);
            // the paths change every fifth round.
            let now = round * DELAY_EVERY_NS / 2;
            let paths = match round % 10 {
                0..5 => &many[..(round % 5) as usize],
                _ => &many[..],
            };
            publisher.publish(&counters, Some(px.merge_delay()), paths, now);
        }
        publisher.publish_final(&counters, Some(px.merge_delay()), &many, u64::MAX);
    });
    assert_eq!(info.count_total, 0, "heap allocations while publishing");

    // What the readers see: the pipeline's counters, the load, the delay, the last paths.
    let r = snapshot.latest();
    let want = px.report();
    assert_eq!(r.merge.merges, want.merge.merges);
    assert_eq!(r.inbound.packets_in, want.inbound.packets_in);
    assert_eq!(r.connections, 1);
    assert_eq!(
        r.delay_ns.as_ref().map(|h| h.len()),
        Some(px.merge_delay().len())
    );
    assert!((r.merge.p99_delay_us - want.merge.p99_delay_us).abs() < 1e-9);
    assert_eq!(r.pmtud_paths, many[100 - MAX_PATHS..]);
    assert!(
        (r.load.busy_ratio - 0.5).abs() < 0.02,
        "{}",
        r.load.busy_ratio
    );
    assert!((r.load.cycles_per_packet - 10_000_000.0 / 32.0).abs() < 1.0);
}
