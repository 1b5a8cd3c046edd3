//! The rte_gro baseline on a real EAL: small traces go through DPDK's GRO with every packet
//! accounted for, payloads intact, and yield and delay where the model puts them.

use dpdk::testing::eal;
use pxbench::engine::EngineResult;
use pxbench::gro_baseline::{run_rte_gro, run_rte_gro_gso, run_rte_gro_with, GroParse};
use pxbench::trace::Trace;
use pxbench::MergeBenchConfig;

fn config() -> MergeBenchConfig {
    MergeBenchConfig {
        min_packets: 8_000,
        verify_payload: true,
        repetitions: 2,
        ..MergeBenchConfig::new(eal())
    }
}

#[test]
fn one_flow_merges_whole_bursts_and_waits_half_a_budget() {
    let cfg = config();
    let trace = Trace::generate(cfg.trace_config(1, 10.0)).unwrap();
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    // A 45-segment burst counted as if cut at 8948 B keeps 7 x 8948 of its 65160 bytes
    // (96.1 %); the few bursts that start back to back merge across and keep a little more.
    assert!(r.outcome.conversion_yield > 0.9, "{:?}", r.outcome);
    assert!(r.outcome.conversion_yield < 0.97, "{:?}", r.outcome);
    // ...and as packets: 8 per burst, 8 x 8948 / 65160 = 1.099 per iMTU, or more when a flush
    // cuts a burst in two.
    assert!(
        (1.09..1.2).contains(&r.outcome.packets_per_imtu),
        "{:?}",
        r.outcome
    );
    // Full flushes every 20 µs of simulated time: delays spread over 0..20 µs.
    assert!(
        (8.0..12.0).contains(&r.outcome.mean_delay_us),
        "{:?}",
        r.outcome
    );
    assert!(r.outcome.p99_delay_us <= 20.0);
    assert!(r.outcome.segments_per_output > 10.0);
    assert!(r.ns_per_pkt > 0.0);
    assert_eq!(r.flow_entry_bytes, 32 * 72);
}

/// rte_gro then rte_gso at the iMTU: the ledger holds every output to the iMTU (a longer one
/// fails the run) and checks every byte; what comes out is what the ledger's "as if cut" rule
/// made of rte_gro's uncapped outputs, and the cut is on the clock.
#[test]
fn gso_cuts_what_rte_gro_merged_to_the_imtu_as_the_ledger_assumed() {
    for (imtu, flows, gbps) in [(9000, 1, 10.0), (4000, 8, 10.0), (9000, 100, 2.0)] {
        let cfg = MergeBenchConfig { imtu, ..config() };
        let trace = Trace::generate(cfg.trace_config(flows, gbps)).unwrap();
        let gro = run_rte_gro(eal(), &trace, &cfg).unwrap();
        let cut = run_rte_gro_gso(eal(), &trace, &cfg).unwrap();
        let what = format!("iMTU {imtu}, {flows} flows");
        assert!(
            (cut.outcome.conversion_yield - gro.outcome.conversion_yield).abs() < 1e-9,
            "{what}: {:?} vs {:?}",
            cut.outcome,
            gro.outcome
        );
        assert!(
            (cut.outcome.packets_per_imtu - gro.outcome.packets_per_imtu).abs() < 1e-9,
            "{what}"
        );
        assert_eq!(
            cut.outcome.mean_delay_us, gro.outcome.mean_delay_us,
            "{what}"
        );
        // Real packets now: more of them than rte_gro's 64 KB ones.
        assert!(
            cut.outcome.output_packets > gro.outcome.output_packets,
            "{what}: {} vs {}",
            cut.outcome.output_packets,
            gro.outcome.output_packets
        );
        let gso = cut.gso_ns_per_pkt.expect("the cut is timed");
        assert!(gso > 0.0 && gso < cut.ns_per_pkt, "{what}");
        assert_eq!(gro.gso_ns_per_pkt, None);
    }
}

#[test]
fn many_flows_fill_one_table_without_losing_a_packet() {
    let cfg = MergeBenchConfig {
        min_bursts_per_flow: 0.25,
        ..config()
    };
    let trace = Trace::generate(cfg.trace_config(800, 0.25)).unwrap();
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    assert!(r.outcome.conversion_yield > 0.8, "{:?}", r.outcome);
    assert!(r.outcome.segments_per_output > 5.0);
}

#[test]
fn no_budget_means_a_flush_after_every_burst() {
    let cfg = MergeBenchConfig {
        delay_budget_ns: 0,
        ..config()
    };
    let trace = Trace::generate(cfg.trace_config(8, 10.0)).unwrap();
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    assert_eq!(r.outcome.mean_delay_us, 0.0);
    assert!(
        r.outcome.segments_per_output > 1.0,
        "bursts still merge within themselves"
    );
    assert!(r.outcome.conversion_yield < 0.9);
}

/// Fairness: rte_gro is handed what a NIC gives, no packet type and no header lengths, and parses
/// every packet inside its timed region.
#[test]
fn rte_gro_gets_only_what_a_nic_gives_and_parses_on_the_clock() {
    use pxbench::gro_baseline::fill;
    let cfg = config();
    let trace = Trace::generate(cfg.trace_config(8, 10.0)).unwrap();
    let pool = dpdk::testing::pool(8, 2048 + 128);
    for slot in [0, 1, trace.len() - 1] {
        let mut m = pool.alloc().unwrap();
        fill(&mut m, &trace, slot).unwrap();
        assert_eq!(m.to_vec(), trace.frame(slot));
        assert_eq!(m.rss_hash(), Some(trace.rss_hash(slot)));
        assert!(m.rx_l4_checksum_good());
        assert_eq!(
            m.packet_type(),
            0,
            "a NIC's packet type is not rte_gro's to rely on"
        );
        assert_eq!(m.header_lens(), (0, 0, 0), "nor are header lengths");
    }
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    assert_eq!(r.parsed_in_timed_region, Some(trace.len() as u64));
    let parse = r.parse_ns_per_pkt.unwrap();
    assert!(
        parse > 0.0 && parse < r.ns_per_pkt,
        "{parse} of {}",
        r.ns_per_pkt
    );
    // Without the parse rte_gro would pass every packet through: yield 0.
    assert!(r.outcome.conversion_yield > 0.8, "{:?}", r.outcome);
    assert!(r.cycles_per_pkt > r.ns_per_pkt, "a TSC above 1 GHz");
    assert_tx_prepared(&r, "rte_gro");
}

/// Every merged output rte_gro hands out was readied for the NIC inside the timed region: the
/// count made there equals the merged outputs counted from the outputs themselves (each of
/// which carries the TX checksum request), and there are some.
fn assert_tx_prepared(r: &EngineResult, what: &str) {
    let prepared = r.tx_prepared_in_timed_region.expect("rte_gro counts them");
    assert_eq!(Some(prepared), r.tx_prepare_due, "{what}");
    // Fewer than the merged outputs' segments: one per output, not per segment.
    assert!(prepared > 0, "{what}: {:?}", r.outcome);
    assert!(prepared <= r.outcome.output_packets, "{what}");
}

/// The minimal parse (packet type and lengths from the fixed Ethernet/IPv4/TCP layout) leads
/// rte_gro to exactly the outputs the full one does, costs less, and is counted on the clock
/// for every packet; GSO's outputs are readied for the NIC and counted too.
#[test]
fn the_minimal_parse_merges_as_the_full_one_and_every_merged_output_is_readied() {
    let cfg = config();
    for (flows, gbps) in [(8, 10.0), (100, 2.0)] {
        let trace = Trace::generate(cfg.trace_config(flows, gbps)).unwrap();
        let full = run_rte_gro(eal(), &trace, &cfg).unwrap();
        let min = run_rte_gro_with(eal(), &trace, &cfg, GroParse::Minimal).unwrap();
        assert_eq!(min.outcome, full.outcome, "{flows} flows");
        assert_eq!(min.parsed_in_timed_region, Some(trace.len() as u64));
        let share = min.parse_ns_per_pkt.unwrap();
        assert!(share > 0.0 && share < min.ns_per_pkt, "{share}");
        assert_tx_prepared(&full, "rte_gro");
        assert_tx_prepared(&min, "rte_gro, minimal parse");
        assert_eq!(
            min.tx_prepared_in_timed_region,
            full.tx_prepared_in_timed_region
        );
        let gso = run_rte_gro_gso(eal(), &trace, &cfg).unwrap();
        assert_tx_prepared(&gso, "rte_gro + rte_gso");
        // GSO readies its pieces: more than rte_gro's merged packets.
        assert!(gso.tx_prepared_in_timed_region > full.tx_prepared_in_timed_region);
    }
}

/// The minimal parse gives the trace's frames the type and lengths `rte_net_get_ptype` gives
/// them, IPv4 and IPv6, and no type at all to a frame of another layout.
#[test]
fn the_minimal_parse_reads_the_fixed_layout_as_rte_net_get_ptype_does() {
    use pxbench::gro_baseline::{fill, parse_fixed_layout};
    let pool = dpdk::testing::pool(8, 2048 + 128);
    for ipv6 in [false, true] {
        let cfg = MergeBenchConfig { ipv6, ..config() };
        let trace = Trace::generate(cfg.trace_config(8, 10.0)).unwrap();
        for slot in [0, trace.len() - 1] {
            let mut a = pool.alloc().unwrap();
            fill(&mut a, &trace, slot).unwrap();
            let mut b = pool.alloc().unwrap();
            fill(&mut b, &trace, slot).unwrap();
            let ptype = parse_fixed_layout(&mut a);
            assert_eq!(ptype, b.parse_packet_type(), "IPv6 {ipv6}");
            assert_eq!(a.packet_type(), b.packet_type());
            assert_eq!(a.header_lens(), b.header_lens());
            assert_eq!(a.ol_flags(), b.ol_flags(), "no TX request set");
        }
    }
    let trace = Trace::generate(config().trace_config(8, 10.0)).unwrap();
    let frame = trace.frame(0);
    // (byte, value): not IPv4 Ethernet, IPv4 options, UDP, a fragment (MF), a later fragment,
    // a TCP data offset under 20 bytes.
    for (at, value) in [
        (12, 0x88),
        (14, 0x46),
        (23, 17),
        (20, 0x20),
        (21, 1),
        (46, 0x40),
    ] {
        let mut bytes = frame.clone();
        bytes[at] = value;
        let mut m = pool.alloc().unwrap();
        m.extend_from_slice(&bytes).unwrap();
        assert_eq!(parse_fixed_layout(&mut m), 0, "byte {at} = {value:#x}");
        assert_eq!((m.packet_type(), m.header_lens()), (0, (0, 0, 0)));
    }
    // A frame cut short within the headers.
    let mut m = pool.alloc().unwrap();
    m.extend_from_slice(&frame[..40]).unwrap();
    assert_eq!(parse_fixed_layout(&mut m), 0);
}

/// The budget is both engines': pxio's windows end at it as rte_gro's flushes do, so that
/// neither holds a segment longer, at each of the benchmark's budgets.
#[test]
fn neither_engine_holds_a_segment_past_the_budget() {
    use pxbench::pxio_engine::{run_pxio, NicInfo};
    for budget_ns in pxbench::DELAY_BUDGETS_NS {
        let cfg = MergeBenchConfig {
            delay_budget_ns: budget_ns,
            ..config()
        };
        let budget_us = budget_ns as f64 / 1e3;
        for (flows, gbps) in [(8, 10.0), (64, 2.0)] {
            let trace = Trace::generate(cfg.trace_config(flows, gbps)).unwrap();
            let gro = run_rte_gro(eal(), &trace, &cfg).unwrap();
            let pxio = run_pxio(eal(), &trace, &cfg, NicInfo::FULL).unwrap();
            for (name, r) in [("rte_gro", &gro), ("pxio", &pxio)] {
                // The histogram's resolution: 0.1 %.
                assert!(
                    r.outcome.max_delay_us <= budget_us * 1.001,
                    "{name}, {flows} flows, budget {budget_us} µs: {:?}",
                    r.outcome
                );
            }
            // rte_gro's flushes come on a grid: some segment waits almost the whole budget.
            assert!(
                gro.outcome.max_delay_us > budget_us * 0.9,
                "{:?}",
                gro.outcome
            );
        }
    }
}

/// IPv6 traces: pxio merges them; DPDK 22.11's rte_gro passes them through (no TCP/IPv6 GRO),
/// every packet accounted for either way.
#[test]
fn ipv6_traces_merge_in_pxio_and_pass_through_rte_gro() {
    use pxbench::pxio_engine::{run_pxio, NicInfo};
    let cfg = MergeBenchConfig {
        ipv6: true,
        ..config()
    };
    let trace = Trace::generate(cfg.trace_config(8, 10.0)).unwrap();
    let pxio = run_pxio(eal(), &trace, &cfg, NicInfo::FULL).unwrap();
    assert!(pxio.outcome.conversion_yield > 0.8, "{:?}", pxio.outcome);
    assert!(
        (1.0..1.3).contains(&pxio.outcome.packets_per_imtu),
        "{:?}",
        pxio.outcome
    );
    let gro = run_rte_gro(eal(), &trace, &cfg).unwrap();
    assert_eq!(gro.outcome.conversion_yield, 0.0, "{:?}", gro.outcome);
    assert_eq!(gro.outcome.output_packets as usize, trace.len());
    assert_eq!(gro.parsed_in_timed_region, Some(trace.len() as u64));
}

/// pxio's NIC variants see the same frames and differ only in time where they cut alike: with
/// TSO (everything a NIC gives, or no RSS hash) the same outputs, and cutting in software (the
/// checksum verdict, or none) the same outputs. TSO hands the NIC fewer, longer packets that
/// reach the wire as about as many iMTU-sized pieces as the software cut makes.
#[test]
fn pxio_variants_agree_on_everything_but_time() {
    use pxbench::pxio_engine::{run_pxio, NicInfo};
    let cfg = config();
    for (flows, gbps) in [(8, 10.0), (64, 2.0)] {
        let trace = Trace::generate(cfg.trace_config(flows, gbps)).unwrap();
        let full = run_pxio(eal(), &trace, &cfg, NicInfo::FULL).unwrap();
        let cut = run_pxio(eal(), &trace, &cfg, NicInfo::SOFTWARE_CUT).unwrap();
        for r in [&full, &cut] {
            assert!(r.outcome.conversion_yield > 0.8, "{:?}", r.outcome);
            assert!(
                (1.0..1.3).contains(&r.outcome.packets_per_imtu),
                "{:?}",
                r.outcome
            );
            assert_eq!(r.parsed_in_timed_region, None);
        }
        assert!(
            full.outcome.output_packets * 2 < cut.outcome.output_packets,
            "TSO: {:?}, software cut: {:?}",
            full.outcome,
            cut.outcome
        );
        let other = run_pxio(eal(), &trace, &cfg, NicInfo::SOFTWARE_HASH).unwrap();
        assert_eq!(other.outcome, full.outcome, "software hash, TSO");
        let other = run_pxio(eal(), &trace, &cfg, NicInfo::SOFTWARE_CSUM).unwrap();
        assert_eq!(
            other.outcome, cut.outcome,
            "software checksums, software cut"
        );
    }
}
