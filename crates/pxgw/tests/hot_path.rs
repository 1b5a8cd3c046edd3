//! A burst through the gateway allocates nothing: after the connections are established and the
//! pipeline has seen traffic once, inbound bursts (merged, with cuts and coalesced packets) and
//! outbound bursts (split to the path MTU) on real mbufs make no heap allocation, with and
//! without what a NIC gives (the RSS hash and the checksum verdicts). Proven with
//! allocation-counter's counting global allocator.

mod common;

use common::tcp4 as tcp;
use dpdk::testing::{assert_no_leaks, pool};
use dpdk::Mbuf;
use pxio::wire;

const FLOWS: u16 = 16;

#[test]
fn a_burst_through_the_gateway_allocates_nothing() {
    for nic in [false, true] {
        bursts_without_allocating(nic);
    }
}

fn bursts_without_allocating(nic: bool) {
    use wire::tcp_flags::{ACK, SYN};
    let rx = pool(2048, 16_384 + 128);
    let headers = pool(4096, 256);
    let mut px = common::mbuf_pipeline(&headers);
    let mbuf = |frame: &[u8], port: u16| {
        let mut m = rx.alloc().unwrap();
        m.extend_from_slice(frame).unwrap();
        if nic {
            m.mark_rx_checksums_good();
            m.set_rss_hash(u32::from(port).wrapping_mul(0x9e37_79b9));
        }
        m
    };
    let mut out: Vec<Mbuf> = Vec::with_capacity(4096);
    // The handshakes, untimed and allowed to allocate (the connection table grows).
    for p in 0..FLOWS {
        let port = 40000 + p;
        px.inbound_burst(
            [mbuf(&tcp(true, port, 999, 0, SYN, &[]), port)],
            1,
            &mut out,
        );
        px.outbound_burst(
            [mbuf(&tcp(false, port, 4999, 1000, SYN | ACK, &[]), port)],
            2,
            &mut out,
        );
        px.inbound_burst(
            [mbuf(&tcp(true, port, 1000, 5000, ACK, &[]), port)],
            3,
            &mut out,
        );
    }
    out.clear();
    // Inbound: runs of 1448 B segments, interleaved, with an LRO-sized one now and then;
    // outbound: 8948 B segments split to the peers' 1500 B.
    let mut seq_in = [1000u32; FLOWS as usize];
    let mut seq_out = [5000u32; FLOWS as usize];
    let payload = vec![7u8; 16_000];
    let mut make_round = |round: u32| {
        let mut inbound = Vec::new();
        let mut outbound = Vec::new();
        for i in 0..32u32 {
            let f = ((i / 4 + round) % u32::from(FLOWS)) as usize;
            let port = 40000 + f as u16;
            let len = if i % 13 == 0 { 14_000 } else { 1448 };
            inbound.push(mbuf(
                &tcp(true, port, seq_in[f], seq_out[f], ACK, &payload[..len]),
                port,
            ));
            seq_in[f] = seq_in[f].wrapping_add(len as u32);
            if i % 4 == 0 {
                outbound.push(mbuf(
                    &tcp(false, port, seq_out[f], seq_in[f], ACK, &payload[..8948]),
                    port,
                ));
                seq_out[f] = seq_out[f].wrapping_add(8948);
            }
        }
        (inbound, outbound)
    };
    // Once without counting: the pipeline's buffers reach their working sizes.
    let (warm_in, warm_out) = make_round(0);
    px.inbound_burst(warm_in, 10_000, &mut out);
    px.outbound_burst(warm_out, 10_000, &mut out);
    out.clear();
    let rounds: Vec<_> = (1..6).map(&mut make_round).collect();
    let mut now = 20_000u64;
    let info = allocation_counter::measure(|| {
        for (inbound, outbound) in rounds {
            now += 5_000;
            px.inbound_burst(inbound, now, &mut out);
            px.outbound_burst(outbound, now, &mut out);
            // What a worker sends is freed by the driver: here, at once.
            out.clear();
        }
        px.poll(now + 1_000_000, &mut out);
        out.clear();
    });
    let r = px.report();
    assert!(
        r.merge.merges > 100 && r.merge.cuts > 0 && r.split.segments > 20,
        "the run merged, cut and split (nic {nic}): merges {}, cuts {}, split segments {}",
        r.merge.merges,
        r.merge.cuts,
        r.split.segments
    );
    assert_eq!(
        info.count_total, 0,
        "heap allocations in the bursts (nic {nic})"
    );
    px.flush(now, &mut out);
    drop(out);
    drop(px);
    assert_no_leaks(&rx);
    assert_no_leaks(&headers);
}
