//! TSO on transmit (`MergeConfig::tso_max_len`): merged packets grow past the iMTU and leave
//! with a TSO request at the iMTU, for the NIC to cut, as the paper's PXIO does (SIGCOMM'26
//! §4.1, "After merging, PM applies TSO"). A tail that waits for more segments waits whole:
//! its last piece is what it waits for, and its full pieces wait with it, within the same
//! window.
//!
//! The properties of `merge_props`, checked on what the NIC is handed (each packet whole, its
//! checksums filled as the NIC fills them, so a wrong seed shows) and on what the NIC puts on
//! the wire (the pieces it cuts): every byte as it arrived, the merge rules, no wire packet
//! over the iMTU, full pieces, no buffer leaked.

mod common;

use common::{
    assert_imtu_bound, case_strategy, check_outputs, config, full_mss_case, roomy_config,
    segment_frames, simple_flow, wire_sizes, Knobs,
};
use proptest::prelude::*;
use pxio::merge::{MergeConfig, Merger};
use pxio::wire::{Class, Parsed};
use pxio::{HeapBuf, HeapPool, PacketBuf};

/// `frame` as a NIC receives it: in a buffer of `pool`, with its checksum verdicts.
fn received(pool: &HeapPool, frame: &[u8]) -> HeapBuf {
    let mut b = pool.packet(frame);
    let (ip, l4) = common::nic_rx_verdicts(frame);
    b.set_ip_csum_verdict(ip);
    b.set_l4_csum_verdict(l4);
    b
}

fn with_tso(cfg: MergeConfig, tso_max_len: u16) -> MergeConfig {
    MergeConfig {
        checksum_offload: true,
        tso_max_len,
        ..cfg
    }
}

/// What the NIC is handed for `b`, its checksums filled as the NIC fills them, after checking
/// the request: a TCP packet past the iMTU asks for TSO at the iMTU (pieces of the iMTU less
/// its headers) and stays within `tso_max_len`; any other fits the iMTU and asks for none.
fn handed(b: HeapBuf, imtu: u16, tso_max_len: u16) -> Vec<u8> {
    let o = b.requested_tx_offload();
    let f = common::nic_tx_frame(b.to_vec(), o);
    if let Class::Tcp(h) = *Parsed::of(&f, f.len()).class() {
        let segsz = o.map_or(0, |o| o.tso_segsz);
        if h.ip_len > imtu {
            assert_eq!(
                segsz,
                imtu - h.l3_len - h.l4_len,
                "a packet of {} B past the iMTU {imtu} asks for pieces of the iMTU",
                h.ip_len
            );
            assert!(h.ip_len <= tso_max_len, "{} B > tso_max_len", h.ip_len);
        } else {
            assert_eq!(segsz, 0, "a packet within the iMTU asks for no TSO");
        }
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the traffic (`case_strategy`: reordering, loss, retransmissions with other
    /// bytes, header changes, chained inputs, junk), with TSO every stream arrives intact and
    /// in order, merged only where the rules allow, whatever the iMTU and TSO limit; no
    /// buffer (input, header copy or view) is leaked.
    #[test]
    fn with_tso_merging_never_corrupts_a_stream(
        case in case_strategy(Knobs::default()),
        imtu in prop_oneof![Just(9000u16), 1528u16..=9000],
        extra in 0u16..=56_535,
        delay in any::<bool>(),
        rss in any::<bool>(),
    ) {
        let tso_max = imtu.saturating_add(extra);
        let pool = HeapPool::new(256);
        {
            let cfg = with_tso(config(imtu, delay), tso_max);
            let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
            let frames = common::run_with(
                &case,
                &mut merger,
                |_, i| common::nic_packet(&pool, i, rss.then_some(i.flow.map_or(7, |f| f as u32 + 1))),
                |p| handed(p, imtu, tso_max),
            );
            check_outputs(&case, &frames, usize::from(tso_max));
            let s = merger.stats();
            prop_assert_eq!(s.packets_in as usize, case.inputs.len());
            prop_assert_eq!(s.packets_out as usize, frames.len());
            prop_assert_eq!(s.held_items, 0);
            prop_assert!(s.max_hold_ns <= common::MAX_WINDOW_NS + common::MAX_POLL_GAP_NS,
                "held {} ns", s.max_hold_ns);
            prop_assert_eq!(merger.pool().in_use(), 0, "header copies and views all returned");
        }
        prop_assert_eq!(pool.in_use(), 0, "every input segment freed once");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// In-order full segments of a burst reach the wire as iMTU-sized pieces, all but each
    /// flow's last, in as few pieces as their bytes need: the packets handed to the NIC hold
    /// whole pieces but each flow's last, and are cut where the software cut would have.
    #[test]
    fn with_tso_in_order_full_segments_reach_the_wire_imtu_sized(
        (case, imtu) in full_mss_case(),
        extra in 0u16..=56_535,
        delay in any::<bool>(),
    ) {
        let tso_max = imtu.saturating_add(extra);
        let pool = HeapPool::new(256);
        let mut merger = Merger::<HeapBuf>::new(with_tso(roomy_config(imtu, delay), tso_max), HeapPool::new(256)).unwrap();
        let frames = common::run_with(
            &case,
            &mut merger,
            |_, i| common::nic_packet(&pool, i, None),
            |p| handed(p, imtu, tso_max),
        );
        let emitted = check_outputs(&case, &frames, usize::from(tso_max));
        assert_imtu_bound(&case, &emitted, imtu);
    }
}

/// A flow's tail past the iMTU waits whole for the segments that complete its last piece: a
/// burst ends and nothing leaves; the next burst's segments grow it to the TSO limit (the most
/// whole pieces a request may carry), where it leaves and the rest of the cut segment starts
/// the next packet. IPv4 and IPv6, at iMTUs of 4000 and 9000 B: on the wire every piece but
/// the last is iMTU-sized, and no more pieces leave than the bytes need.
#[test]
fn a_tail_past_the_imtu_waits_whole_and_leaves_at_the_tso_limit() {
    for (id, imtu) in [(1u8, 9000u16), (2, 9000), (1, 4000), (2, 4000)] {
        let fl = simple_flow(id);
        let l34 = fl.l3_l4_len();
        let segsz = usize::from(imtu) - l34;
        let limit = (65_535 - l34) / segsz * segsz;
        let mss = 1448 - if fl.v6 { 20 } else { 0 };
        let frames = segment_frames(&fl, 60, mss);
        let pool = HeapPool::new(4096);
        let cfg = MergeConfig {
            max_segs: 128,
            ..with_tso(config(imtu, true), 65_535)
        };
        let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
        let make = |f: &Vec<u8>| received(&pool, f);
        let mut out = Vec::new();
        let handed_over = |out: &mut Vec<HeapBuf>| -> Vec<usize> {
            out.drain(..)
                .map(|b| {
                    let o = b
                        .requested_tx_offload()
                        .expect("merged packets ask for offloads");
                    let ip_len = b.len() - usize::from(o.l2_len);
                    let tso = if ip_len > usize::from(imtu) { segsz } else { 0 };
                    assert_eq!(usize::from(o.tso_segsz), tso, "{ip_len} B");
                    ip_len
                })
                .collect()
        };
        let what = format!("{} iMTU {imtu}", if fl.v6 { "IPv6" } else { "IPv4" });

        // First burst: 20 segments, more than one piece. The tail waits, whole.
        merger.rx_burst(frames[..20].iter().map(make), 1_000, &mut out);
        assert_eq!(
            handed_over(&mut out),
            Vec::<usize>::new(),
            "{what}: first burst"
        );
        assert_eq!(merger.stats().held_items, 1, "{what}: the tail waits");
        assert_eq!(merger.stats().delayed_items, 1, "{what}");

        // Second burst, 1 µs later: 40 more. The tail reaches the TSO limit and leaves.
        merger.rx_burst(frames[20..].iter().map(make), 2_000, &mut out);
        assert_eq!(
            handed_over(&mut out),
            vec![l34 + limit],
            "{what}: second burst"
        );
        assert_eq!(merger.stats().cuts, 1, "{what}: one cut, at the TSO limit");

        merger.flush_all(10_000, &mut out);
        let rest = 60 * mss - limit;
        assert_eq!(handed_over(&mut out), vec![l34 + rest], "{what}: the rest");

        let mut sizes = wire_sizes(l34 + limit, l34, usize::from(imtu));
        sizes.extend(wire_sizes(l34 + rest, l34, usize::from(imtu)));
        let full = sizes[..sizes.len() - 1]
            .iter()
            .all(|&s| s == usize::from(imtu));
        assert!(full, "{what}: wire pieces {sizes:?}");
        assert_eq!(sizes.len(), (60 * mss).div_ceil(segsz), "{what}: {sizes:?}");
        assert_eq!(
            merger.pool().in_use(),
            0,
            "{what}: the cut's header copy returned"
        );
        drop(merger);
        assert_eq!(pool.in_use(), 0, "{what}: every segment freed once");
    }
}

/// TSO is refused where it cannot work: a limit under the iMTU, or without checksum offload
/// (the NIC fills the pieces' checksums).
#[test]
fn tso_needs_checksum_offload_and_a_limit_past_the_imtu() {
    let key = |cfg: MergeConfig| cfg.validate().map_err(|e| e.key);
    let ok = with_tso(MergeConfig::default(), 65_535);
    assert_eq!(key(ok.clone()), Ok(()));
    assert_eq!(
        key(MergeConfig {
            tso_max_len: 8999,
            ..ok.clone()
        }),
        Err("tso_max_len")
    );
    assert_eq!(
        key(MergeConfig {
            checksum_offload: false,
            ..ok
        }),
        Err("tso_max_len")
    );
}

/// A waiting tail's deadline is exact as it moves: after each burst, `next_deadline` names the
/// tail's own deadline (a TSO tail's moves with its data), a poll before it sends nothing and
/// leaves it in place, a poll at it sends the tail, and then nothing waits. IPv4 and IPv6.
#[test]
fn a_waiting_tails_deadline_is_exact_as_it_moves() {
    for id in [1u8, 2] {
        let fl = simple_flow(id);
        let mss = 1448 - if fl.v6 { 20 } else { 0 };
        let frames = segment_frames(&fl, 40, mss);
        let pool = HeapPool::new(4096);
        let cfg = MergeConfig {
            max_segs: 128,
            ..with_tso(config(9000, true), 65_535)
        };
        let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
        let make = |f: &Vec<u8>| received(&pool, f);
        let what = if fl.v6 { "IPv6" } else { "IPv4" };
        let mut out = Vec::new();
        // Three bursts, together short of the TSO limit: the tail waits through all three. The
        // second moves its deadline earlier (the flow's rate rose), the third, 13 µs later,
        // moves the IPv4 tail's later (its last piece began later): a poll at the earlier
        // deadline would find nothing due.
        let t3 = 15_000;
        merger.rx_burst(frames[..14].iter().map(make), 1_000, &mut out);
        merger.rx_burst(frames[14..27].iter().map(make), 2_000, &mut out);
        assert!(merger.next_deadline().is_some(), "{what}: the tail waits");
        merger.rx_burst(frames[27..].iter().map(make), t3, &mut out);
        assert!(out.is_empty(), "{what}: the tail waits");
        let due = merger.next_deadline().expect("the tail waits");
        assert!(due > t3, "{what}: {due}");

        merger.poll(due - 1, &mut out);
        assert!(out.is_empty(), "{what}: not yet due");
        assert_eq!(merger.next_deadline(), Some(due), "{what}: unmoved");
        merger.poll(due, &mut out);
        let sent: usize = out.drain(..).map(|b| b.len()).sum();
        assert_eq!(
            sent,
            40 * mss + 14 + 4 * fl.vlan.len() + fl.l3_l4_len(),
            "{what}: the whole tail, one packet"
        );
        assert_eq!(merger.next_deadline(), None, "{what}: nothing waits");
        assert_eq!(merger.stats().held_items, 0, "{what}");
        drop(merger);
        assert_eq!(pool.in_use(), 0, "{what}: every segment freed once");
    }
}
