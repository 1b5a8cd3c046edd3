//! Packet efficiency: what an NF behind the engine pays per packet, so besides the byte yield the
//! engine must not leave runts. In-order 64 KB TSO bursts (the paper's traffic, SIGCOMM'26 §7.1)
//! from a few flows whose bursts overlap, cut into RX bursts of 32 at line rate, with the engine's
//! default configuration (adaptive delay on), must leave as few packets as their payload needs: at
//! most 1.15 packets per iMTU of payload, IPv4 and IPv6, at iMTU 4000 and 9000. A cut's remainder
//! is carried into the flow's next item; it is not flushed as a runt at the end of an RX burst,
//! and flows whose RSS hashes collide do not evict each other from the flow table (each eviction
//! flushes a flow's items as runts).

mod common;

use common::{check_outputs, Case, FlowSpec, Input, SegFlags, SegHdr};
use pxio::merge::{MergeConfig, Merger};
use pxio::PacketBuf;
use pxio::{HeapBuf, HeapPool};

/// Segments of one 64 KB TSO burst.
const SEGS_PER_TSO: usize = 45;
/// RX burst size, as a DPDK worker polls.
const RX_BURST: usize = 32;
/// One 1514 B frame at 100 Gb/s.
const SEG_GAP_NS: u64 = 120;

/// `flows` flows of `v6`, each sending `tso_bursts` TSO bursts of full-MSS segments (MTU 1500
/// with the timestamps option; the last segment of each burst with PSH, as Linux sends it),
/// flow f's bursts starting 1.5 µs after flow f-1's so that they overlap and interleave, one
/// burst per flow every 250 µs (about 2 Gb/s each).
fn tso_case(v6: bool, flows: usize, tso_bursts: usize) -> Case {
    let specs: Vec<FlowSpec> = (0..flows)
        .map(|i| FlowSpec {
            v6,
            id: i as u8 + 1,
            // Source address and port rise together, as from a NAT pool: the symmetric RSS
            // key (`0x6d5a` repeated) gives all these flows one Toeplitz hash.
            sport: if v6 { 0x8000 } else { 0x8100 } + i as u16 + 1,
            dport: 5201,
            isn: 1_000_000 * i as u32,
            ack: 1,
            df: true,
            ttl: 64,
            ..FlowSpec::default()
        })
        .collect();
    let mss = 1500 - specs[0].l3_l4_len();
    let streams: Vec<Vec<u8>> = (0..flows)
        .map(|f| {
            (0..tso_bursts * SEGS_PER_TSO * mss)
                .map(|i| (i * 13 + f * 7) as u8)
                .collect()
        })
        .collect();
    // (arrival ns, flow, segment index)
    let mut arrivals = Vec::new();
    for f in 0..flows {
        for b in 0..tso_bursts {
            let start = b as u64 * 250_000 + f as u64 * 1_500;
            for s in 0..SEGS_PER_TSO {
                arrivals.push((start + s as u64 * SEG_GAP_NS, f, b * SEGS_PER_TSO + s));
            }
        }
    }
    arrivals.sort();
    let inputs: Vec<Input> = arrivals
        .iter()
        .map(|&(_, f, s)| {
            let flags = SegFlags {
                psh: s % SEGS_PER_TSO == SEGS_PER_TSO - 1,
                ..SegFlags::default()
            };
            Input::data(
                &specs[f],
                f,
                s * mss,
                &streams[f][s * mss..(s + 1) * mss],
                s as u16,
                SegHdr::of(&specs[f], 1),
                flags,
            )
        })
        .collect();
    // RX bursts of 32, each handed over when its last segment arrived; a burst also ends at a
    // gap in the traffic (the NIC had nothing more).
    let mut bursts = Vec::new();
    let (mut start, mut last_time) = (0usize, 0u64);
    let mut i = 0;
    while i < arrivals.len() {
        let mut end = i + 1;
        while end < arrivals.len()
            && end - i < RX_BURST
            && arrivals[end].0 - arrivals[end - 1].0 <= SEG_GAP_NS
        {
            end += 1;
        }
        let at = arrivals[end - 1].0;
        bursts.push((end, at - last_time));
        last_time = at;
        start = end;
        i = end;
    }
    debug_assert_eq!(start, inputs.len());
    Case {
        flows: specs,
        streams,
        inputs,
        bursts,
    }
}

/// Packets out per iMTU of payload, for `case` through an engine with the defaults at `imtu`
/// (with `tso`, TSO on transmit: each packet past the iMTU counts as the pieces the NIC cuts).
fn packets_per_imtu(case: &Case, imtu: u16, tso: bool) -> (f64, Vec<usize>) {
    let cfg = MergeConfig {
        imtu,
        checksum_offload: tso,
        tso_max_len: if tso { u16::MAX } else { 0 },
        ..MergeConfig::default()
    };
    let pool = HeapPool::new(256);
    let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
    let frames = common::run_with(
        case,
        &mut merger,
        // With TSO the frames carry the NIC's checksum verdicts (TSO needs checksum offload);
        // without, the engine verifies every segment itself.
        |_, i| {
            if tso {
                common::nic_packet(&pool, i, None)
            } else {
                common::assemble(i, &|f: &[u8]| pool.packet(f))
            }
        },
        |p| common::nic_tx_frame(p.to_vec(), p.requested_tx_offload()),
    );
    let bound = if tso {
        usize::from(u16::MAX)
    } else {
        usize::from(imtu)
    };
    let emitted = check_outputs(case, &frames, bound);
    let l34 = case.flows[0].l3_l4_len();
    let per_packet = usize::from(imtu) - l34;
    let payload: usize = case.streams.iter().map(Vec::len).sum();
    let sizes: Vec<usize> = emitted
        .iter()
        .flat_map(|e| common::wire_sizes(e.ip_len, l34, usize::from(imtu)))
        .collect();
    (
        sizes.len() as f64 / (payload as f64 / per_packet as f64),
        sizes,
    )
}

fn assert_efficient(v6: bool, imtu: u16, tso: bool) {
    for flows in [1, 2, 4, 8, 16] {
        let case = tso_case(v6, flows, 6);
        let (ppi, sizes) = packets_per_imtu(&case, imtu, tso);
        let runts = sizes.iter().filter(|&&s| s < usize::from(imtu) / 4).count();
        assert!(
            ppi <= 1.15,
            "{} iMTU {imtu}{}, {flows} flow(s): {ppi:.3} packets per iMTU of payload ({} packets, \
             {runts} under a quarter of the iMTU): {sizes:?}",
            if v6 { "IPv6" } else { "IPv4" },
            if tso { " with TSO" } else { "" },
            sizes.len()
        );
    }
}

#[test]
fn tso_bursts_leave_few_runts_ipv4_imtu_4000() {
    assert_efficient(false, 4000, false);
}

#[test]
fn tso_bursts_leave_few_runts_ipv6_imtu_4000() {
    assert_efficient(true, 4000, false);
}

#[test]
fn tso_bursts_leave_few_runts_ipv4_imtu_9000() {
    assert_efficient(false, 9000, false);
}

#[test]
fn tso_bursts_leave_few_runts_ipv6_imtu_9000() {
    assert_efficient(true, 9000, false);
}

#[test]
fn tso_bursts_leave_few_runts_ipv4_imtu_4000_with_tso() {
    assert_efficient(false, 4000, true);
}

#[test]
fn tso_bursts_leave_few_runts_ipv6_imtu_4000_with_tso() {
    assert_efficient(true, 4000, true);
}

#[test]
fn tso_bursts_leave_few_runts_ipv4_imtu_9000_with_tso() {
    assert_efficient(false, 9000, true);
}

#[test]
fn tso_bursts_leave_few_runts_ipv6_imtu_9000_with_tso() {
    assert_efficient(true, 9000, true);
}
